// vk.c: flashvk's C calling layer over Vulkan. See vk.h.
#define _GNU_SOURCE 1
#include "vk.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Implemented in Go (log.go).
extern void fvkGoLog(uintptr_t handle, int32_t severity, int32_t types, char *msg);

// ---- Counters --------------------------------------------------------------------

static fvk_counters g_counters;

static void count_create(fvk_counters *c, int kind) {
	__atomic_fetch_add(&g_counters.live[kind], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&g_counters.created[kind], 1, __ATOMIC_RELAXED);
	if (c) {
		__atomic_fetch_add(&c->live[kind], 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&c->created[kind], 1, __ATOMIC_RELAXED);
	}
}

static void count_destroy(fvk_counters *c, int kind) {
	__atomic_fetch_sub(&g_counters.live[kind], 1, __ATOMIC_RELAXED);
	if (c) __atomic_fetch_sub(&c->live[kind], 1, __ATOMIC_RELAXED);
}

static void copy_counters(fvk_counters *dst, fvk_counters *src) {
	for (int i = 0; i < FVK_OBJ_COUNT; i++) {
		dst->live[i] = __atomic_load_n(&src->live[i], __ATOMIC_RELAXED);
		dst->created[i] = __atomic_load_n(&src->created[i], __ATOMIC_RELAXED);
	}
}

void fvk_global_counters(fvk_counters *out) { copy_counters(out, &g_counters); }

void fvk_instance_counters(fvk_instance *in, fvk_counters *out) { copy_counters(out, &in->cnt); }

#define DCNT(d) (&(d)->in->cnt)

// counted counts a device object of kind when r says it was created; it
// returns r.
static VkResult counted(fvk_device *d, int kind, VkResult r) {
	if (r == VK_SUCCESS) count_create(DCNT(d), kind);
	return r;
}

// CREATE(d, Fn, ci, out, kind) creates a device object of kind with
// d->Fn(device, ci, NULL, out) and counts it; the VkResult. DESTROY(d, Fn,
// h, kind) destroys h with d->Fn(device, h, NULL) and uncounts it.
#define CREATE(d, Fn, ci, out, kind) counted((d), (kind), (d)->Fn((d)->device, (ci), NULL, (out)))
#define DESTROY(d, Fn, h, kind) ((d)->Fn((d)->device, (h), NULL), count_destroy(DCNT(d), (kind)))

// ---- Loader -----------------------------------------------------------------------

static void *g_lib;
static PFN_vkGetInstanceProcAddr g_gipa;
static PFN_vkCreateInstance g_CreateInstance;
static PFN_vkEnumerateInstanceVersion g_EnumerateInstanceVersion;
static PFN_vkEnumerateInstanceLayerProperties g_EnumerateInstanceLayerProperties;
static PFN_vkEnumerateInstanceExtensionProperties g_EnumerateInstanceExtensionProperties;

// fvk_load is called under the Go side's lock. A loader once opened stays
// (its library is never closed); a failed attempt can be retried.
int fvk_load(const char *path, char *err, size_t errlen) {
	if (g_gipa) return 0;
	const char *names[2];
	int n = 0;
	if (path && *path) {
		names[n++] = path; // an explicit choice: no fallback
	} else {
		names[n++] = "libvulkan.so.1";
		names[n++] = "libvulkan.so";
	}
	char errs[512] = {0};
	void *lib = NULL;
	for (int i = 0; i < n && !lib; i++) {
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
		if (!lib) {
			const char *e = dlerror();
			size_t l = strlen(errs);
			snprintf(errs + l, sizeof errs - l, "%s%s", l ? "; " : "", e ? e : names[i]);
		}
	}
	if (!lib) {
		snprintf(err, errlen, "dlopen: %s", errs);
		return -1;
	}
	PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
	if (!gipa) {
		snprintf(err, errlen, "vkGetInstanceProcAddr not found in the Vulkan loader");
		return -1;
	}
	g_CreateInstance = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
	g_EnumerateInstanceVersion = (PFN_vkEnumerateInstanceVersion)gipa(NULL, "vkEnumerateInstanceVersion");
	g_EnumerateInstanceLayerProperties =
	    (PFN_vkEnumerateInstanceLayerProperties)gipa(NULL, "vkEnumerateInstanceLayerProperties");
	g_EnumerateInstanceExtensionProperties =
	    (PFN_vkEnumerateInstanceExtensionProperties)gipa(NULL, "vkEnumerateInstanceExtensionProperties");
	if (!g_CreateInstance || !g_EnumerateInstanceLayerProperties || !g_EnumerateInstanceExtensionProperties) {
		snprintf(err, errlen, "the Vulkan loader lacks global entry points");
		return -1;
	}
	g_lib = lib;
	g_gipa = gipa;
	return 0;
}

uint32_t fvk_loader_version(void) {
	uint32_t v = VK_API_VERSION_1_0;
	if (g_EnumerateInstanceVersion) g_EnumerateInstanceVersion(&v);
	return v;
}

int fvk_layer_available(const char *name) {
	uint32_t n = 0;
	if (g_EnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
	VkLayerProperties *props = calloc(n, sizeof *props);
	if (!props) return 0;
	int found = 0;
	if (g_EnumerateInstanceLayerProperties(&n, props) >= 0) {
		for (uint32_t i = 0; i < n; i++)
			if (strcmp(props[i].layerName, name) == 0) found = 1;
	}
	free(props);
	return found;
}

// Instance extensions are enumerated once per process: with loaders that
// load and unload every driver for each enumeration, repeated calls are slow
// and, with drivers using static TLS (NVIDIA), eventually fail.
static pthread_once_t g_ext_once = PTHREAD_ONCE_INIT;
static int g_has_props2, g_has_portability;

static void scan_instance_exts(void) {
	uint32_t n = 0;
	if (g_EnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS || n == 0) return;
	VkExtensionProperties *props = calloc(n, sizeof *props);
	if (!props) return;
	if (g_EnumerateInstanceExtensionProperties(NULL, &n, props) >= 0) {
		for (uint32_t i = 0; i < n; i++) {
			if (strcmp(props[i].extensionName, "VK_KHR_get_physical_device_properties2") == 0) g_has_props2 = 1;
			if (strcmp(props[i].extensionName, "VK_KHR_portability_enumeration") == 0) g_has_portability = 1;
		}
	}
	free(props);
}

// ---- Pinning driver libraries -------------------------------------------------
//
// The loader dlcloses drivers when the last instance is destroyed and
// dlopens them again for the next one. glibc never reclaims the static TLS
// of an unloaded library, so drivers with initial-exec TLS (NVIDIA's
// libnvidia-tls) make vkCreateInstance fail after a few dozen cycles
// ("cannot allocate memory in static TLS block" -> VK_ERROR_INCOMPATIBLE_DRIVER).
// After each successful vkCreateInstance every loaded library is marked
// RTLD_NODELETE, so drivers and layers stay loaded for the process lifetime.

typedef struct {
	char **names;
	int n, cap;
} libnames;

static int collect_lib(struct dl_phdr_info *info, size_t size, void *data) {
	(void)size;
	libnames *l = data;
	if (!info->dlpi_name || !info->dlpi_name[0] || strstr(info->dlpi_name, "linux-vdso")) return 0;
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 64;
		char **p = realloc(l->names, cap * sizeof *p);
		if (!p) return 1;
		l->names = p;
		l->cap = cap;
	}
	l->names[l->n] = strdup(info->dlpi_name);
	if (l->names[l->n]) l->n++;
	return 0;
}

static pthread_mutex_t g_pin_mu = PTHREAD_MUTEX_INITIALIZER;

static void pin_loaded_libraries(void) {
	libnames l = {0};
	// dlopen must not run inside dl_iterate_phdr (it holds the loader lock).
	dl_iterate_phdr(collect_lib, &l);
	pthread_mutex_lock(&g_pin_mu);
	for (int i = 0; i < l.n; i++) {
		// Takes a reference that is never released; NODELETE also survives
		// the loader's own dlclose.
		(void)dlopen(l.names[i], RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
		free(l.names[i]);
	}
	pthread_mutex_unlock(&g_pin_mu);
	free(l.names);
}

// ---- Instance ---------------------------------------------------------------------

static VKAPI_ATTR VkBool32 VKAPI_CALL debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                               VkDebugUtilsMessageTypeFlagsEXT types,
                                               const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
	if (data && data->pMessage) fvkGoLog((uintptr_t)user, (int32_t)severity, (int32_t)types, (char *)data->pMessage);
	return VK_FALSE;
}

#define IPROC(in, name) (in)->name = (PFN_vk##name)g_gipa((in)->instance, "vk" #name)

VkResult fvk_instance_create(int validation, uintptr_t log_handle, fvk_instance **out) {
	*out = NULL;
	fvk_instance *in = calloc(1, sizeof *in);
	if (!in) return VK_ERROR_OUT_OF_HOST_MEMORY;
	uint32_t loader = fvk_loader_version();
	in->api = loader >= VK_API_VERSION_1_1 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_0;
	in->log_handle = log_handle;

	VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
	app.pApplicationName = "flashvk";
	app.applicationVersion = 1;
	app.pEngineName = "flashvk";
	app.engineVersion = 1;
	app.apiVersion = in->api;

	const char *exts[4];
	uint32_t next = 0;
	const char *layers[1];
	uint32_t nlayers = 0;
	VkInstanceCreateInfo ci = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
	pthread_once(&g_ext_once, scan_instance_exts);
	if (in->api < VK_API_VERSION_1_1 && g_has_props2) exts[next++] = "VK_KHR_get_physical_device_properties2";
	if (g_has_portability) {
		exts[next++] = "VK_KHR_portability_enumeration";
		ci.flags |= 0x00000001; // VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
	}
	VkDebugUtilsMessengerCreateInfoEXT mci = {VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
	int debug = 0;
	if (validation) {
		layers[nlayers++] = "VK_LAYER_KHRONOS_validation";
		// The validation layer itself provides VK_EXT_debug_utils.
		exts[next++] = "VK_EXT_debug_utils";
		debug = 1;
		mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
		                      VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
		mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
		                  VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
		                  VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
		mci.pfnUserCallback = debug_cb;
		mci.pUserData = (void *)log_handle;
		ci.pNext = &mci; // also reports messages from vkCreateInstance/vkDestroyInstance
	}
	ci.pApplicationInfo = &app;
	ci.enabledExtensionCount = next;
	ci.ppEnabledExtensionNames = exts;
	ci.enabledLayerCount = nlayers;
	ci.ppEnabledLayerNames = layers;
	VkResult r = g_CreateInstance(&ci, NULL, &in->instance);
	if (r != VK_SUCCESS) {
		free(in);
		return r;
	}
	count_create(&in->cnt, FVK_OBJ_INSTANCE);
	pin_loaded_libraries();

	IPROC(in, DestroyInstance);
	IPROC(in, EnumeratePhysicalDevices);
	IPROC(in, GetPhysicalDeviceProperties);
	IPROC(in, GetPhysicalDeviceFeatures);
	IPROC(in, GetPhysicalDeviceMemoryProperties);
	IPROC(in, GetPhysicalDeviceQueueFamilyProperties);
	IPROC(in, EnumerateDeviceExtensionProperties);
	IPROC(in, CreateDevice);
	IPROC(in, GetDeviceProcAddr);
	if (in->api >= VK_API_VERSION_1_1) {
		IPROC(in, GetPhysicalDeviceProperties2);
		IPROC(in, GetPhysicalDeviceFeatures2);
	} else {
		in->GetPhysicalDeviceProperties2 =
		    (PFN_vkGetPhysicalDeviceProperties2)g_gipa(in->instance, "vkGetPhysicalDeviceProperties2KHR");
		in->GetPhysicalDeviceFeatures2 =
		    (PFN_vkGetPhysicalDeviceFeatures2)g_gipa(in->instance, "vkGetPhysicalDeviceFeatures2KHR");
	}
	in->GetCoopMatPropsKHR = g_gipa(in->instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
	in->GetCoopMatFlexPropsNV =
	    g_gipa(in->instance, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV");

	if (debug) {
		IPROC(in, CreateDebugUtilsMessengerEXT);
		IPROC(in, DestroyDebugUtilsMessengerEXT);
		if (in->CreateDebugUtilsMessengerEXT &&
		    in->CreateDebugUtilsMessengerEXT(in->instance, &mci, NULL, &in->messenger) == VK_SUCCESS)
			count_create(&in->cnt, FVK_OBJ_MESSENGER);
		else
			in->messenger = VK_NULL_HANDLE;
	}

	uint32_t n = 0;
	r = in->EnumeratePhysicalDevices(in->instance, &n, NULL);
	if (r == VK_SUCCESS && n > 0) {
		if (n > FVK_MAX_PHYS) n = FVK_MAX_PHYS;
		r = in->EnumeratePhysicalDevices(in->instance, &n, in->phys);
		if (r == VK_INCOMPLETE) r = VK_SUCCESS;
	}
	if (r != VK_SUCCESS) {
		fvk_instance_destroy(in, NULL);
		return r;
	}
	in->nphys = n;
	*out = in;
	return VK_SUCCESS;
}

void fvk_instance_destroy(fvk_instance *in, fvk_counters *final) {
	if (!in) return;
	if (in->messenger != VK_NULL_HANDLE) {
		in->DestroyDebugUtilsMessengerEXT(in->instance, in->messenger, NULL);
		count_destroy(&in->cnt, FVK_OBJ_MESSENGER);
	}
	in->DestroyInstance(in->instance, NULL);
	count_destroy(&in->cnt, FVK_OBJ_INSTANCE);
	if (final) copy_counters(final, &in->cnt);
	free(in);
}

// ---- Physical device info ---------------------------------------------------------

static int has_ext(VkExtensionProperties *exts, uint32_t n, const char *name) {
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(exts[i].extensionName, name) == 0) return 1;
	return 0;
}

#define CHAIN(tailp, s)                        \
	do {                                   \
		*(tailp) = (void *)(s);        \
		(tailp) = &(s)->pNext;         \
	} while (0)

// QUERY_ARRAY(pfn, pd, arr, max, stype, count): the two-call idiom of the
// vkGetPhysicalDevice*Properties* commands that fill an array of
// out-structures: at most max of arr's elements, each with sType stype, are
// filled by pfn (a PFN_vkVoidFunction) for pd; count is set to how many, or
// to 0 if the second call fails (left alone if the first does).
#define QUERY_ARRAY(pfn, pd, arr, max, stype, count)                                                   \
	do {                                                                                           \
		typedef VkResult(VKAPI_PTR * fn_t)(VkPhysicalDevice, uint32_t *, __typeof__(&(arr)[0])); \
		fn_t fn = (fn_t)(pfn);                                                                 \
		uint32_t n = 0;                                                                        \
		if (fn((pd), &n, NULL) == VK_SUCCESS) {                                                \
			if (n > (max)) n = (max);                                                      \
			for (uint32_t i = 0; i < n; i++) (arr)[i].sType = (stype);                     \
			VkResult r = fn((pd), &n, (arr));                                              \
			(count) = (r == VK_SUCCESS || r == VK_INCOMPLETE) ? n : 0;                     \
		}                                                                                      \
	} while (0)

void fvk_query(fvk_instance *in, uint32_t index, fvk_info *o) {
	memset(o, 0, sizeof *o);
	o->queue_family = UINT32_MAX;
	if (index >= in->nphys) return;
	VkPhysicalDevice pd = in->phys[index];

	VkPhysicalDeviceProperties p;
	in->GetPhysicalDeviceProperties(pd, &p);
	o->api_version = p.apiVersion;
	o->driver_version = p.driverVersion;
	o->vendor_id = p.vendorID;
	o->device_id = p.deviceID;
	o->device_type = p.deviceType;
	memcpy(o->name, p.deviceName, sizeof o->name);
	memcpy(o->pipeline_cache_uuid, p.pipelineCacheUUID, VK_UUID_SIZE);
	o->max_shared = p.limits.maxComputeSharedMemorySize;
	for (int i = 0; i < 3; i++) {
		o->max_wg_size[i] = p.limits.maxComputeWorkGroupSize[i];
		o->max_wg_count[i] = p.limits.maxComputeWorkGroupCount[i];
	}
	o->max_wg_invocations = p.limits.maxComputeWorkGroupInvocations;
	o->max_push = p.limits.maxPushConstantsSize;
	o->max_storage_range = p.limits.maxStorageBufferRange;
	o->max_alloc_count = p.limits.maxMemoryAllocationCount;
	o->max_storage_buffers = p.limits.maxPerStageDescriptorStorageBuffers;
	o->min_storage_align = p.limits.minStorageBufferOffsetAlignment;
	o->timestamp_period = p.limits.timestampPeriod;

	uint32_t api = p.apiVersion < in->api ? p.apiVersion : in->api;
	// Compare major.minor only.
	api = VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api), 0);

	uint32_t next = 0;
	VkExtensionProperties *exts = NULL;
	if (in->EnumerateDeviceExtensionProperties(pd, NULL, &next, NULL) == VK_SUCCESS && next > 0) {
		exts = calloc(next, sizeof *exts);
		if (!exts || in->EnumerateDeviceExtensionProperties(pd, NULL, &next, exts) < 0) next = 0;
	}
	int v12 = api >= VK_API_VERSION_1_2, v13 = api >= VK_API_VERSION_1_3;
	int e16 = has_ext(exts, next, "VK_KHR_16bit_storage");
	int e8 = !v12 && has_ext(exts, next, "VK_KHR_8bit_storage");
	int ef16 = !v12 && has_ext(exts, next, "VK_KHR_shader_float16_int8");
	int eset = !v12 && has_ext(exts, next, "VK_KHR_shader_subgroup_extended_types");
	int evmm = !v12 && has_ext(exts, next, "VK_KHR_vulkan_memory_model");
	int edrv = !v12 && has_ext(exts, next, "VK_KHR_driver_properties");
	int esc = !v13 && has_ext(exts, next, "VK_EXT_subgroup_size_control");
	int em4 = !v13 && has_ext(exts, next, "VK_KHR_maintenance4");
	int ebda = !v12 && has_ext(exts, next, "VK_KHR_buffer_device_address");
	int ecm = has_ext(exts, next, "VK_KHR_cooperative_matrix");
	int ecm2 = has_ext(exts, next, "VK_NV_cooperative_matrix2");
	int ebf = has_ext(exts, next, "VK_KHR_shader_bfloat16");
	int esm = has_ext(exts, next, "VK_NV_shader_sm_builtins");
	int eamd = has_ext(exts, next, "VK_AMD_shader_core_properties");
	int eexec = has_ext(exts, next, "VK_KHR_pipeline_executable_properties");
	o->ext_portability = has_ext(exts, next, "VK_KHR_portability_subset");
	free(exts);

	VkPhysicalDeviceFeatures f;
	in->GetPhysicalDeviceFeatures(pd, &f);
	o->shader_int16 = f.shaderInt16;
	o->shader_int64 = f.shaderInt64;
	o->shader_float64 = f.shaderFloat64;

	int have2 = in->GetPhysicalDeviceProperties2 && in->GetPhysicalDeviceFeatures2 && api >= VK_API_VERSION_1_1;
	if (have2) {
		// Properties.
		VkPhysicalDeviceProperties2 p2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
		VkPhysicalDeviceSubgroupProperties sg = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
		VkPhysicalDeviceMaintenance3Properties m3 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
		VkPhysicalDeviceDriverProperties drv = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
		VkPhysicalDeviceSubgroupSizeControlProperties scp = {
		    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
		VkPhysicalDeviceMaintenance4Properties m4 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
		fvk_coopmat_props_khr cmp = {FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR};
		fvk_coopmat2_props_nv cm2p = {FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV};
		VkPhysicalDeviceShaderSMBuiltinsPropertiesNV smp = {
		    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
		VkPhysicalDeviceShaderCorePropertiesAMD amdp = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD};
		void **tail = &p2.pNext;
		CHAIN(tail, &sg);
		if (esm) CHAIN(tail, &smp);
		if (eamd) CHAIN(tail, &amdp);
		CHAIN(tail, &m3);
		if (v12 || edrv) CHAIN(tail, &drv);
		if (v13 || esc) CHAIN(tail, &scp);
		if (v13 || em4) CHAIN(tail, &m4);
		if (ecm) CHAIN(tail, &cmp);
		if (ecm2) CHAIN(tail, &cm2p);
		in->GetPhysicalDeviceProperties2(pd, &p2);
		o->subgroup_size = sg.subgroupSize;
		o->subgroup_stages = sg.supportedStages;
		o->subgroup_ops = sg.supportedOperations;
		o->max_alloc = m3.maxMemoryAllocationSize;
		o->driver_id = drv.driverID;
		memcpy(o->driver_name, drv.driverName, sizeof o->driver_name);
		memcpy(o->driver_info, drv.driverInfo, sizeof o->driver_info);
		o->min_subgroup = scp.minSubgroupSize;
		o->max_subgroup = scp.maxSubgroupSize;
		o->max_wg_subgroups = scp.maxComputeWorkgroupSubgroups;
		o->required_subgroup_stages = scp.requiredSubgroupSizeStages;
		o->max_buffer_size = m4.maxBufferSize;
		if (esm) o->compute_units = smp.shaderSMCount;
		else if (eamd)
			o->compute_units = amdp.shaderEngineCount * amdp.shaderArraysPerEngineCount *
			                   amdp.computeUnitsPerShaderArray;
		o->coopmat_stages = cmp.cooperativeMatrixSupportedStages;
		o->coopmat2_props = cm2p;
		o->coopmat2_props.pNext = NULL;

		// Features.
		VkPhysicalDeviceFeatures2 f2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
		VkPhysicalDevice16BitStorageFeatures s16 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
		VkPhysicalDevice8BitStorageFeatures s8 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES};
		VkPhysicalDeviceShaderFloat16Int8Features fi = {
		    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
		VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures set = {
		    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES};
		VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {
		    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
		VkPhysicalDeviceSubgroupSizeControlFeatures scf = {
		    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
		fvk_coopmat_features_khr cmf = {FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
		fvk_coopmat2_features_nv cm2f = {FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV};
		fvk_bf16_features_khr bf = {FVK_STYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR};
		VkPhysicalDeviceBufferDeviceAddressFeatures bdaf = {
		    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
		VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exf = {
		    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
		tail = &f2.pNext;
		CHAIN(tail, &s16);
		if (v12 || e8) CHAIN(tail, &s8);
		if (v12 || ef16) CHAIN(tail, &fi);
		if (v12 || eset) CHAIN(tail, &set);
		if (v12 || evmm) CHAIN(tail, &vmm);
		if (v13 || esc) CHAIN(tail, &scf);
		if (ecm) CHAIN(tail, &cmf);
		if (ecm2) CHAIN(tail, &cm2f);
		if (ebf) CHAIN(tail, &bf);
		if (v12 || ebda) CHAIN(tail, &bdaf);
		if (eexec) CHAIN(tail, &exf);
		in->GetPhysicalDeviceFeatures2(pd, &f2);
		o->storage16 = s16.storageBuffer16BitAccess;
		o->push16 = s16.storagePushConstant16;
		o->storage8 = s8.storageBuffer8BitAccess;
		o->shader_float16 = fi.shaderFloat16;
		o->shader_int8 = fi.shaderInt8;
		o->subgroup_ext_types = set.shaderSubgroupExtendedTypes;
		o->vmm = vmm.vulkanMemoryModel;
		o->vmm_device_scope = vmm.vulkanMemoryModelDeviceScope;
		o->subgroup_size_control =
		    scf.subgroupSizeControl && (o->required_subgroup_stages & VK_SHADER_STAGE_COMPUTE_BIT);
		o->compute_full_subgroups = scf.computeFullSubgroups;
		o->coopmat = cmf.cooperativeMatrix && (o->coopmat_stages & VK_SHADER_STAGE_COMPUTE_BIT);
		o->coopmat_robust = cmf.cooperativeMatrixRobustBufferAccess;
		o->coopmat2 = cm2f;
		o->coopmat2.pNext = NULL;
		o->bf16_type = bf.shaderBFloat16Type;
		o->bf16_dot = bf.shaderBFloat16DotProduct;
		o->bf16_coopmat = bf.shaderBFloat16CooperativeMatrix;
		o->bda = bdaf.bufferDeviceAddress;
		o->exec_props = eexec && exf.pipelineExecutableInfo;

		// Extensions to enable (only where a wanted feature is present).
		o->ext_16bit = 0; // core since 1.1, which extended queries require anyway
		(void)e16;
		o->ext_8bit = e8 && o->storage8;
		o->ext_f16i8 = ef16 && (o->shader_float16 || o->shader_int8);
		o->ext_subgroup_ext_types = eset && o->subgroup_ext_types;
		o->ext_vmm = evmm && o->vmm;
		o->ext_size_control = esc && (scf.subgroupSizeControl || scf.computeFullSubgroups);
		o->ext_maintenance4 = 0; // only queried, never needed for creation
		o->ext_coopmat = ecm && o->coopmat;
		int any2 = cm2f.cooperativeMatrixWorkgroupScope || cm2f.cooperativeMatrixFlexibleDimensions ||
		           cm2f.cooperativeMatrixReductions || cm2f.cooperativeMatrixConversions ||
		           cm2f.cooperativeMatrixPerElementOperations || cm2f.cooperativeMatrixTensorAddressing ||
		           cm2f.cooperativeMatrixBlockLoads;
		o->ext_coopmat2 = ecm2 && any2 && o->ext_coopmat;
		if (!o->ext_coopmat2) memset(&o->coopmat2, 0, sizeof o->coopmat2);
		o->ext_bf16 = ebf && (o->bf16_type || o->bf16_dot || o->bf16_coopmat);
		o->ext_bda = ebda && o->bda;

		if (o->coopmat && in->GetCoopMatPropsKHR)
			QUERY_ARRAY(in->GetCoopMatPropsKHR, pd, o->coopmats, FVK_MAX_COOPMAT,
			            FVK_STYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR, o->ncoopmat);
		if (o->ext_coopmat2 && o->coopmat2.cooperativeMatrixFlexibleDimensions && in->GetCoopMatFlexPropsNV)
			QUERY_ARRAY(in->GetCoopMatFlexPropsNV, pd, o->flex, FVK_MAX_FLEX,
			            FVK_STYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV, o->nflex);
	}
	if (o->max_alloc == 0) o->max_alloc = (uint64_t)1 << 31; // Vulkan 1.0: unknown; be conservative
	if (o->max_subgroup == 0) o->min_subgroup = o->max_subgroup = o->subgroup_size;

	VkPhysicalDeviceMemoryProperties mp;
	in->GetPhysicalDeviceMemoryProperties(pd, &mp);
	o->nheaps = mp.memoryHeapCount;
	for (uint32_t i = 0; i < mp.memoryHeapCount; i++) {
		o->heap_size[i] = mp.memoryHeaps[i].size;
		o->heap_flags[i] = mp.memoryHeaps[i].flags;
	}
	o->ntypes = mp.memoryTypeCount;
	for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
		o->type_flags[i] = mp.memoryTypes[i].propertyFlags;
		o->type_heap[i] = mp.memoryTypes[i].heapIndex;
	}

	// Queue family: prefer a compute-only family (NVIDIA/AMD async compute
	// queues), then any compute family; among equals prefer timestamp support.
	uint32_t nq = 0;
	in->GetPhysicalDeviceQueueFamilyProperties(pd, &nq, NULL);
	VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof *qf);
	if (qf) {
		in->GetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf);
		int best = -1;
		for (uint32_t i = 0; i < nq; i++) {
			if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || qf[i].queueCount == 0) continue;
			int score = (qf[i].timestampValidBits ? 2 : 0) + ((qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) ? 0 : 1);
			if (score > best) {
				best = score;
				o->queue_family = i;
				o->timestamp_valid_bits = qf[i].timestampValidBits;
			}
		}
		free(qf);
	}
}

// ---- Logical device ----------------------------------------------------------------

#define DPROC(d, name) (d)->name = (PFN_vk##name)(d)->in->GetDeviceProcAddr((d)->device, "vk" #name)

VkResult fvk_device_create(fvk_instance *in, uint32_t index, const fvk_info *o, const void *cache_data,
                           size_t cache_size, fvk_device **out) {
	*out = NULL;
	if (index >= in->nphys || o->queue_family == UINT32_MAX) return VK_ERROR_INITIALIZATION_FAILED;
	fvk_device *d = calloc(1, sizeof *d);
	if (!d) return VK_ERROR_OUT_OF_HOST_MEMORY;
	d->in = in;
	d->phys = in->phys[index];
	d->family = o->queue_family;
	in->GetPhysicalDeviceMemoryProperties(d->phys, &d->mem);

	const char *exts[16];
	uint32_t next = 0;
	if (o->ext_16bit) exts[next++] = "VK_KHR_16bit_storage";
	if (o->ext_8bit) exts[next++] = "VK_KHR_8bit_storage";
	if (o->ext_f16i8) exts[next++] = "VK_KHR_shader_float16_int8";
	if (o->ext_subgroup_ext_types) exts[next++] = "VK_KHR_shader_subgroup_extended_types";
	if (o->ext_vmm) exts[next++] = "VK_KHR_vulkan_memory_model";
	if (o->ext_size_control) exts[next++] = "VK_EXT_subgroup_size_control";
	if (o->ext_coopmat) exts[next++] = "VK_KHR_cooperative_matrix";
	if (o->ext_coopmat2) exts[next++] = "VK_NV_cooperative_matrix2";
	if (o->ext_bf16) exts[next++] = "VK_KHR_shader_bfloat16";
	if (o->ext_portability) exts[next++] = "VK_KHR_portability_subset";
	if (o->ext_bda) exts[next++] = "VK_KHR_buffer_device_address";
	int stats = o->ext_exec_props && o->exec_props;
	if (stats) exts[next++] = "VK_KHR_pipeline_executable_properties";

	uint32_t api = o->api_version < in->api ? o->api_version : in->api;
	api = VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api), 0);
	int v11 = api >= VK_API_VERSION_1_1, v12 = api >= VK_API_VERSION_1_2, v13 = api >= VK_API_VERSION_1_3;

	VkPhysicalDeviceFeatures2 f2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
	f2.features.shaderInt16 = o->shader_int16;
	f2.features.shaderInt64 = o->shader_int64;
	f2.features.shaderFloat64 = o->shader_float64;
	VkPhysicalDevice16BitStorageFeatures s16 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
	s16.storageBuffer16BitAccess = o->storage16;
	s16.storagePushConstant16 = o->push16;
	VkPhysicalDevice8BitStorageFeatures s8 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES};
	s8.storageBuffer8BitAccess = o->storage8;
	VkPhysicalDeviceShaderFloat16Int8Features fi = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
	fi.shaderFloat16 = o->shader_float16;
	fi.shaderInt8 = o->shader_int8;
	VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures set = {
	    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES};
	set.shaderSubgroupExtendedTypes = o->subgroup_ext_types;
	VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
	vmm.vulkanMemoryModel = o->vmm;
	vmm.vulkanMemoryModelDeviceScope = o->vmm_device_scope;
	VkPhysicalDeviceSubgroupSizeControlFeatures scf = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
	scf.subgroupSizeControl = o->subgroup_size_control;
	scf.computeFullSubgroups = o->compute_full_subgroups;
	fvk_coopmat_features_khr cmf = {FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
	cmf.cooperativeMatrix = o->coopmat;
	fvk_coopmat2_features_nv cm2f = o->coopmat2;
	cm2f.sType = FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV;
	cm2f.pNext = NULL;
	fvk_bf16_features_khr bf = {FVK_STYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR};
	bf.shaderBFloat16Type = o->bf16_type;
	bf.shaderBFloat16DotProduct = o->bf16_dot;
	bf.shaderBFloat16CooperativeMatrix = o->bf16_coopmat;
	// Only bufferDeviceAddress: capture/replay and multi-device stay off.
	VkPhysicalDeviceBufferDeviceAddressFeatures bdaf = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
	bdaf.bufferDeviceAddress = o->bda;
	int bda = (v12 || o->ext_bda) && o->bda;
	// Only pipelineExecutableInfo, and only when asked (ext_exec_props).
	VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR exf = {
	    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
	exf.pipelineExecutableInfo = VK_TRUE;

	void **tail = &f2.pNext;
	if ((v11 || o->ext_16bit) && (o->storage16 || o->push16)) CHAIN(tail, &s16);
	if ((v12 || o->ext_8bit) && o->storage8) CHAIN(tail, &s8);
	if ((v12 || o->ext_f16i8) && (o->shader_float16 || o->shader_int8)) CHAIN(tail, &fi);
	if ((v12 || o->ext_subgroup_ext_types) && o->subgroup_ext_types) CHAIN(tail, &set);
	if ((v12 || o->ext_vmm) && o->vmm) CHAIN(tail, &vmm);
	if ((v13 || o->ext_size_control) && (o->subgroup_size_control || o->compute_full_subgroups)) CHAIN(tail, &scf);
	if (o->ext_coopmat) CHAIN(tail, &cmf);
	if (o->ext_coopmat2) CHAIN(tail, &cm2f);
	if (o->ext_bf16) CHAIN(tail, &bf);
	if (bda) CHAIN(tail, &bdaf);
	if (stats) CHAIN(tail, &exf);

	float prio = 1.0f;
	VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
	qci.queueFamilyIndex = d->family;
	qci.queueCount = 1;
	qci.pQueuePriorities = &prio;
	VkDeviceCreateInfo ci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
	ci.queueCreateInfoCount = 1;
	ci.pQueueCreateInfos = &qci;
	ci.enabledExtensionCount = next;
	ci.ppEnabledExtensionNames = exts;
	if (in->GetPhysicalDeviceFeatures2 && v11) {
		ci.pNext = &f2;
	} else {
		ci.pEnabledFeatures = &f2.features;
	}
	VkResult r = in->CreateDevice(d->phys, &ci, NULL, &d->device);
	if (r != VK_SUCCESS) {
		free(d);
		return r;
	}
	count_create(&in->cnt, FVK_OBJ_DEVICE);
	d->size_control = o->subgroup_size_control;

	DPROC(d, DestroyDevice);
	DPROC(d, GetDeviceQueue);
	DPROC(d, DeviceWaitIdle);
	DPROC(d, QueueSubmit);
	DPROC(d, CreateBuffer);
	DPROC(d, DestroyBuffer);
	DPROC(d, GetBufferMemoryRequirements);
	DPROC(d, AllocateMemory);
	DPROC(d, FreeMemory);
	DPROC(d, BindBufferMemory);
	DPROC(d, MapMemory);
	DPROC(d, UnmapMemory);
	DPROC(d, FlushMappedMemoryRanges);
	DPROC(d, InvalidateMappedMemoryRanges);
	DPROC(d, CreateShaderModule);
	DPROC(d, DestroyShaderModule);
	DPROC(d, CreateDescriptorSetLayout);
	DPROC(d, DestroyDescriptorSetLayout);
	DPROC(d, CreatePipelineLayout);
	DPROC(d, DestroyPipelineLayout);
	DPROC(d, CreateComputePipelines);
	DPROC(d, DestroyPipeline);
	DPROC(d, CreatePipelineCache);
	DPROC(d, DestroyPipelineCache);
	DPROC(d, GetPipelineCacheData);
	DPROC(d, MergePipelineCaches);
	DPROC(d, CreateDescriptorPool);
	DPROC(d, DestroyDescriptorPool);
	DPROC(d, ResetDescriptorPool);
	DPROC(d, AllocateDescriptorSets);
	DPROC(d, UpdateDescriptorSets);
	DPROC(d, CreateCommandPool);
	DPROC(d, DestroyCommandPool);
	DPROC(d, ResetCommandPool);
	DPROC(d, AllocateCommandBuffers);
	DPROC(d, BeginCommandBuffer);
	DPROC(d, EndCommandBuffer);
	DPROC(d, CmdBindPipeline);
	DPROC(d, CmdBindDescriptorSets);
	DPROC(d, CmdPushConstants);
	DPROC(d, CmdDispatch);
	DPROC(d, CmdPipelineBarrier);
	DPROC(d, CmdCopyBuffer);
	DPROC(d, CmdFillBuffer);
	DPROC(d, CmdUpdateBuffer);
	DPROC(d, CmdWriteTimestamp);
	DPROC(d, CmdResetQueryPool);
	DPROC(d, CreateQueryPool);
	DPROC(d, DestroyQueryPool);
	DPROC(d, GetQueryPoolResults);
	DPROC(d, CreateFence);
	DPROC(d, DestroyFence);
	DPROC(d, WaitForFences);
	DPROC(d, ResetFences);
	DPROC(d, GetFenceStatus);
	if (v11) {
		DPROC(d, CmdDispatchBase);
		d->dispatch_base = d->CmdDispatchBase != NULL;
	}
	if (bda) {
		const char *name = o->ext_bda ? "vkGetBufferDeviceAddressKHR" : "vkGetBufferDeviceAddress";
		d->GetBufferDeviceAddress = (PFN_vkGetBufferDeviceAddress)in->GetDeviceProcAddr(d->device, name);
		d->bda = d->GetBufferDeviceAddress != NULL;
	}
	if (stats) {
		DPROC(d, GetPipelineExecutablePropertiesKHR);
		DPROC(d, GetPipelineExecutableStatisticsKHR);
		d->capture_stats = d->GetPipelineExecutablePropertiesKHR && d->GetPipelineExecutableStatisticsKHR;
	}

	d->GetDeviceQueue(d->device, d->family, 0, &d->queue);

	VkPipelineCacheCreateInfo pci = {VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
	pci.initialDataSize = cache_data ? cache_size : 0;
	pci.pInitialData = cache_data;
	r = d->CreatePipelineCache(d->device, &pci, NULL, &d->cache);
	if (r != VK_SUCCESS && cache_data) {
		// A rejected blob must not prevent opening the device.
		pci.initialDataSize = 0;
		pci.pInitialData = NULL;
		r = d->CreatePipelineCache(d->device, &pci, NULL, &d->cache);
	}
	if (r != VK_SUCCESS) {
		d->DestroyDevice(d->device, NULL);
		count_destroy(&in->cnt, FVK_OBJ_DEVICE);
		free(d);
		return r;
	}
	count_create(&in->cnt, FVK_OBJ_PIPELINE_CACHE);
	*out = d;
	return VK_SUCCESS;
}

void fvk_device_destroy(fvk_device *d) {
	if (!d) return;
	if (d->cache != VK_NULL_HANDLE) DESTROY(d, DestroyPipelineCache, d->cache, FVK_OBJ_PIPELINE_CACHE);
	d->DestroyDevice(d->device, NULL);
	count_destroy(DCNT(d), FVK_OBJ_DEVICE);
	free(d);
}

VkResult fvk_device_wait_idle(fvk_device *d) { return d->DeviceWaitIdle(d->device); }

VkResult fvk_pipeline_cache_data(fvk_device *d, size_t *size, void *data) {
	return d->GetPipelineCacheData(d->device, d->cache, size, data);
}

VkResult fvk_pipeline_cache_merge(fvk_device *d, const void *data, size_t size) {
	VkPipelineCacheCreateInfo pci = {VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
	pci.initialDataSize = size;
	pci.pInitialData = data;
	VkPipelineCache tmp;
	VkResult r = CREATE(d, CreatePipelineCache, &pci, &tmp, FVK_OBJ_PIPELINE_CACHE);
	if (r != VK_SUCCESS) return r;
	r = d->MergePipelineCaches(d->device, d->cache, 1, &tmp);
	DESTROY(d, DestroyPipelineCache, tmp, FVK_OBJ_PIPELINE_CACHE);
	return r;
}

// ---- Buffers ------------------------------------------------------------------------

static int find_type(fvk_device *d, uint32_t bits, uint32_t want, uint32_t avoid) {
	for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++) {
		uint32_t fl = d->mem.memoryTypes[i].propertyFlags;
		if ((bits & (1u << i)) && (fl & want) == want && !(fl & avoid)) return (int)i;
	}
	return -1;
}

static uint64_t buffer_address(fvk_device *d, VkBuffer b) {
	VkBufferDeviceAddressInfo ai = {VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
	ai.buffer = b;
	return d->GetBufferDeviceAddress(d->device, &ai);
}

VkResult fvk_buffer_create(fvk_device *d, uint64_t size, int kind, fvk_buffer *out) {
	memset(out, 0, sizeof *out);
	VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
	bci.size = size;
	bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
	            VK_BUFFER_USAGE_TRANSFER_DST_BIT;
	int addressed = kind == FVK_MEM_DEVICE && d->bda;
	if (addressed) bci.usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
	bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
	VkResult r = CREATE(d, CreateBuffer, &bci, &out->buffer, FVK_OBJ_BUFFER);
	if (r != VK_SUCCESS) return r;

	VkMemoryRequirements req;
	d->GetBufferMemoryRequirements(d->device, out->buffer, &req);
	const uint32_t DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
	               HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
	               LAZY = VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT | VK_MEMORY_PROPERTY_PROTECTED_BIT;
	int t = -1;
	switch (kind) {
	case FVK_MEM_DEVICE:
		t = find_type(d, req.memoryTypeBits, DL, LAZY);
		if (t < 0) t = find_type(d, req.memoryTypeBits, 0, LAZY);
		break;
	case FVK_MEM_UPLOAD:
		// System memory the GPU reads over the bus: host-visible, coherent, not device-local first.
		t = find_type(d, req.memoryTypeBits, HV | HC, LAZY | DL);
		if (t < 0) t = find_type(d, req.memoryTypeBits, HV | HC, LAZY);
		if (t < 0) t = find_type(d, req.memoryTypeBits, HV, LAZY);
		break;
	case FVK_MEM_DOWNLOAD:
		t = find_type(d, req.memoryTypeBits, HV | HC | CA, LAZY);
		if (t < 0) t = find_type(d, req.memoryTypeBits, HV | CA, LAZY);
		if (t < 0) t = find_type(d, req.memoryTypeBits, HV | HC, LAZY);
		if (t < 0) t = find_type(d, req.memoryTypeBits, HV, LAZY);
		break;
	}
	// An allocation larger than its heap is invalid usage, not a failure
	// the driver reports: refuse it here.
	if (t < 0) {
		fvk_buffer_destroy(d, out);
		return VK_ERROR_OUT_OF_DEVICE_MEMORY;
	}
	uint64_t heap = d->mem.memoryHeaps[d->mem.memoryTypes[t].heapIndex].size;
	if (req.size > heap) {
		fvk_buffer_destroy(d, out);
		out->over_heap = heap;
		return VK_ERROR_OUT_OF_DEVICE_MEMORY;
	}
	VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
	mai.allocationSize = req.size;
	mai.memoryTypeIndex = (uint32_t)t;
	VkMemoryAllocateFlagsInfo mafi = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
	mafi.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
	if (addressed) mai.pNext = &mafi;
	r = CREATE(d, AllocateMemory, &mai, &out->memory, FVK_OBJ_MEMORY);
	if (r != VK_SUCCESS) {
		fvk_buffer_destroy(d, out);
		return r;
	}
	r = d->BindBufferMemory(d->device, out->buffer, out->memory, 0);
	if (r == VK_SUCCESS && kind != FVK_MEM_DEVICE) {
		r = d->MapMemory(d->device, out->memory, 0, VK_WHOLE_SIZE, 0, &out->mapped);
		out->coherent = (d->mem.memoryTypes[t].propertyFlags & HC) != 0;
	}
	if (r != VK_SUCCESS) {
		fvk_buffer_destroy(d, out);
		return r;
	}
	if (addressed) out->address = buffer_address(d, out->buffer);
	out->size = size;
	out->atom = 256; // >= any nonCoherentAtomSize seen in practice; only used for non-coherent memory
	return VK_SUCCESS;
}

void fvk_buffer_destroy(fvk_device *d, fvk_buffer *b) {
	if (b->buffer != VK_NULL_HANDLE) DESTROY(d, DestroyBuffer, b->buffer, FVK_OBJ_BUFFER);
	if (b->memory != VK_NULL_HANDLE) {
		if (b->mapped) d->UnmapMemory(d->device, b->memory);
		DESTROY(d, FreeMemory, b->memory, FVK_OBJ_MEMORY);
	}
	memset(b, 0, sizeof *b);
}

static VkMappedMemoryRange whole_range(fvk_buffer *b) {
	VkMappedMemoryRange mr = {VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
	mr.memory = b->memory;
	mr.offset = 0;
	mr.size = VK_WHOLE_SIZE;
	return mr;
}

VkResult fvk_buffer_flush(fvk_device *d, fvk_buffer *b, uint64_t size) {
	(void)size;
	if (b->coherent) return VK_SUCCESS;
	VkMappedMemoryRange mr = whole_range(b);
	return d->FlushMappedMemoryRanges(d->device, 1, &mr);
}

VkResult fvk_buffer_invalidate(fvk_device *d, fvk_buffer *b, uint64_t size) {
	(void)size;
	if (b->coherent) return VK_SUCCESS;
	VkMappedMemoryRange mr = whole_range(b);
	return d->InvalidateMappedMemoryRanges(d->device, 1, &mr);
}

// ---- Pipelines ------------------------------------------------------------------------

VkResult fvk_set_layout_create(fvk_device *d, uint32_t n, VkDescriptorSetLayout *out) {
	if (n > FVK_MAX_BINDINGS) return VK_ERROR_INITIALIZATION_FAILED;
	VkDescriptorSetLayoutBinding b[FVK_MAX_BINDINGS];
	memset(b, 0, sizeof b);
	for (uint32_t i = 0; i < n; i++) {
		b[i].binding = i;
		b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
		b[i].descriptorCount = 1;
		b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
	}
	VkDescriptorSetLayoutCreateInfo ci = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
	ci.bindingCount = n;
	ci.pBindings = b;
	return CREATE(d, CreateDescriptorSetLayout, &ci, out, FVK_OBJ_SET_LAYOUT);
}

void fvk_set_layout_destroy(fvk_device *d, VkDescriptorSetLayout l) {
	DESTROY(d, DestroyDescriptorSetLayout, l, FVK_OBJ_SET_LAYOUT);
}

VkResult fvk_pipeline_layout_create(fvk_device *d, VkDescriptorSetLayout set, uint32_t push_size,
                                    VkPipelineLayout *out) {
	VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size};
	VkPipelineLayoutCreateInfo ci = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
	ci.setLayoutCount = 1;
	ci.pSetLayouts = &set;
	ci.pushConstantRangeCount = push_size ? 1 : 0;
	ci.pPushConstantRanges = push_size ? &pr : NULL;
	return CREATE(d, CreatePipelineLayout, &ci, out, FVK_OBJ_PIPELINE_LAYOUT);
}

void fvk_pipeline_layout_destroy(fvk_device *d, VkPipelineLayout l) {
	DESTROY(d, DestroyPipelineLayout, l, FVK_OBJ_PIPELINE_LAYOUT);
}

VkResult fvk_pipeline_create(fvk_device *d, const uint32_t *code, size_t code_size, const char *entry,
                             const uint32_t *spec_ids, const uint32_t *spec_vals, uint32_t nspec,
                             VkPipelineLayout layout, uint32_t subgroup_size, uint32_t full_subgroups,
                             VkPipeline *out) {
	VkShaderModuleCreateInfo smci = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
	smci.codeSize = code_size;
	smci.pCode = code;
	VkShaderModule sm;
	VkResult r = CREATE(d, CreateShaderModule, &smci, &sm, FVK_OBJ_SHADER_MODULE);
	if (r != VK_SUCCESS) return r;

	VkSpecializationMapEntry *entries = NULL;
	VkSpecializationInfo si = {0};
	if (nspec > 0) {
		entries = calloc(nspec, sizeof *entries);
		if (!entries) {
			r = VK_ERROR_OUT_OF_HOST_MEMORY;
			goto out;
		}
		for (uint32_t i = 0; i < nspec; i++) {
			entries[i].constantID = spec_ids[i];
			entries[i].offset = i * 4;
			entries[i].size = 4;
		}
		si.mapEntryCount = nspec;
		si.pMapEntries = entries;
		si.dataSize = nspec * 4;
		si.pData = spec_vals;
	}
	VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rss = {
	    VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
	rss.requiredSubgroupSize = subgroup_size;
	VkComputePipelineCreateInfo ci = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
	ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
	ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
	ci.stage.module = sm;
	ci.stage.pName = entry;
	ci.stage.pSpecializationInfo = nspec ? &si : NULL;
	if (subgroup_size) ci.stage.pNext = &rss;
	if (full_subgroups) ci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
	if (d->dispatch_base) ci.flags |= VK_PIPELINE_CREATE_DISPATCH_BASE_BIT;
	if (d->capture_stats) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
	ci.layout = layout;
	r = counted(d, FVK_OBJ_PIPELINE, d->CreateComputePipelines(d->device, d->cache, 1, &ci, NULL, out));
out:
	free(entries);
	DESTROY(d, DestroyShaderModule, sm, FVK_OBJ_SHADER_MODULE);
	return r;
}

void fvk_pipeline_destroy(fvk_device *d, VkPipeline p) { DESTROY(d, DestroyPipeline, p, FVK_OBJ_PIPELINE); }

VkResult fvk_pipeline_executables(fvk_device *d, VkPipeline p, uint32_t *count, fvk_executable **out) {
	*count = 0;
	*out = NULL;
	if (!d->capture_stats) return VK_ERROR_FEATURE_NOT_PRESENT;
	VkPipelineInfoKHR pi = {VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
	pi.pipeline = p;
	uint32_t n = 0;
	VkResult r = d->GetPipelineExecutablePropertiesKHR(d->device, &pi, &n, NULL);
	if (r != VK_SUCCESS || n == 0) return r;
	VkPipelineExecutablePropertiesKHR *props = calloc(n, sizeof *props);
	fvk_executable *ex = calloc(n, sizeof *ex);
	if (!props || !ex) {
		free(props);
		free(ex);
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	for (uint32_t i = 0; i < n; i++) props[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR;
	r = d->GetPipelineExecutablePropertiesKHR(d->device, &pi, &n, props);
	if (r == VK_INCOMPLETE) r = VK_SUCCESS; // fewer than the first call said: keep those
	if (r == VK_SUCCESS) {
		for (uint32_t i = 0; i < n; i++) {
			memcpy(ex[i].name, props[i].name, sizeof ex[i].name);
			memcpy(ex[i].description, props[i].description, sizeof ex[i].description);
			ex[i].name[VK_MAX_DESCRIPTION_SIZE - 1] = ex[i].description[VK_MAX_DESCRIPTION_SIZE - 1] = 0;
			ex[i].stages = props[i].stages;
			ex[i].subgroup_size = props[i].subgroupSize;
		}
		*count = n;
		*out = ex;
	} else {
		free(ex);
	}
	free(props);
	return r;
}

VkResult fvk_pipeline_statistics(fvk_device *d, VkPipeline p, uint32_t index, uint32_t *count, fvk_statistic **out) {
	*count = 0;
	*out = NULL;
	if (!d->capture_stats) return VK_ERROR_FEATURE_NOT_PRESENT;
	VkPipelineExecutableInfoKHR ei = {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
	ei.pipeline = p;
	ei.executableIndex = index;
	uint32_t n = 0;
	VkResult r = d->GetPipelineExecutableStatisticsKHR(d->device, &ei, &n, NULL);
	if (r != VK_SUCCESS || n == 0) return r;
	VkPipelineExecutableStatisticKHR *st = calloc(n, sizeof *st);
	fvk_statistic *o = calloc(n, sizeof *o);
	if (!st || !o) {
		free(st);
		free(o);
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	for (uint32_t i = 0; i < n; i++) st[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
	r = d->GetPipelineExecutableStatisticsKHR(d->device, &ei, &n, st);
	if (r == VK_INCOMPLETE) r = VK_SUCCESS;
	if (r == VK_SUCCESS) {
		for (uint32_t i = 0; i < n; i++) {
			memcpy(o[i].name, st[i].name, sizeof o[i].name);
			memcpy(o[i].description, st[i].description, sizeof o[i].description);
			o[i].name[VK_MAX_DESCRIPTION_SIZE - 1] = o[i].description[VK_MAX_DESCRIPTION_SIZE - 1] = 0;
			o[i].format = (int32_t)st[i].format;
			switch (st[i].format) {
			case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
				o[i].bits = st[i].value.b32 ? 1 : 0;
				break;
			case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
				o[i].bits = (uint64_t)st[i].value.i64;
				break;
			case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
				o[i].bits = st[i].value.u64;
				break;
			case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
				memcpy(&o[i].bits, &st[i].value.f64, sizeof o[i].bits);
				break;
			default:
				memcpy(&o[i].bits, &st[i].value, sizeof o[i].bits);
			}
		}
		*count = n;
		*out = o;
	} else {
		free(o);
	}
	free(st);
	return r;
}

// ---- Frames ----------------------------------------------------------------------------

#define POOL_SETS 256
#define POOL_DESCS 1024

VkResult fvk_frame_create(fvk_device *d, fvk_frame **out) {
	*out = NULL;
	fvk_frame *f = calloc(1, sizeof *f);
	if (!f) return VK_ERROR_OUT_OF_HOST_MEMORY;
	VkCommandPoolCreateInfo pci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
	pci.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
	pci.queueFamilyIndex = d->family;
	VkResult r = CREATE(d, CreateCommandPool, &pci, &f->pool, FVK_OBJ_COMMAND_POOL);
	if (r != VK_SUCCESS) goto fail;
	VkCommandBufferAllocateInfo ai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
	ai.commandPool = f->pool;
	ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
	ai.commandBufferCount = 1;
	r = d->AllocateCommandBuffers(d->device, &ai, &f->cmd);
	if (r != VK_SUCCESS) goto fail;
	VkFenceCreateInfo fci = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	r = CREATE(d, CreateFence, &fci, &f->fence, FVK_OBJ_FENCE);
	if (r != VK_SUCCESS) goto fail;
	*out = f;
	return VK_SUCCESS;
fail:
	fvk_frame_destroy(d, f);
	return r;
}

void fvk_frame_destroy(fvk_device *d, fvk_frame *f) {
	if (!f) return;
	for (uint32_t i = 0; i < f->ndpools; i++) DESTROY(d, DestroyDescriptorPool, f->dpools[i], FVK_OBJ_DESCRIPTOR_POOL);
	free(f->dpools);
	if (f->qpool != VK_NULL_HANDLE) DESTROY(d, DestroyQueryPool, f->qpool, FVK_OBJ_QUERY_POOL);
	if (f->fence != VK_NULL_HANDLE) DESTROY(d, DestroyFence, f->fence, FVK_OBJ_FENCE);
	if (f->pool != VK_NULL_HANDLE) DESTROY(d, DestroyCommandPool, f->pool, FVK_OBJ_COMMAND_POOL); // frees f->cmd
	free(f);
}

VkResult fvk_frame_reset(fvk_device *d, fvk_frame *f) {
	VkResult r = d->ResetCommandPool(d->device, f->pool, 0);
	if (r != VK_SUCCESS) return r;
	for (uint32_t i = 0; i < f->ndpools; i++) {
		r = d->ResetDescriptorPool(d->device, f->dpools[i], 0);
		if (r != VK_SUCCESS) return r;
	}
	f->curdpool = 0;
	f->sets_left = f->ndpools ? POOL_SETS : 0;
	f->descs_left = f->ndpools ? POOL_DESCS : 0;
	return d->ResetFences(d->device, 1, &f->fence);
}

static VkResult next_dpool(fvk_device *d, fvk_frame *f) {
	if (f->ndpools > 0 && f->curdpool + 1 < f->ndpools) {
		f->curdpool++;
	} else {
		if (f->ndpools == f->capdpools) {
			uint32_t cap = f->capdpools ? 2 * f->capdpools : 4;
			VkDescriptorPool *p = realloc(f->dpools, cap * sizeof *p);
			if (!p) return VK_ERROR_OUT_OF_HOST_MEMORY;
			f->dpools = p;
			f->capdpools = cap;
		}
		VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, POOL_DESCS};
		VkDescriptorPoolCreateInfo ci = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
		ci.maxSets = POOL_SETS;
		ci.poolSizeCount = 1;
		ci.pPoolSizes = &ps;
		VkResult r = CREATE(d, CreateDescriptorPool, &ci, &f->dpools[f->ndpools], FVK_OBJ_DESCRIPTOR_POOL);
		if (r != VK_SUCCESS) return r;
		f->curdpool = f->ndpools++;
	}
	f->sets_left = POOL_SETS;
	f->descs_left = POOL_DESCS;
	return VK_SUCCESS;
}

static VkResult alloc_set(fvk_device *d, fvk_frame *f, VkDescriptorSetLayout l, uint32_t n, VkDescriptorSet *out) {
	if (f->ndpools == 0 || f->sets_left == 0 || f->descs_left < n) {
		VkResult r = next_dpool(d, f);
		if (r != VK_SUCCESS) return r;
	}
	VkDescriptorSetAllocateInfo ai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
	ai.descriptorPool = f->dpools[f->curdpool];
	ai.descriptorSetCount = 1;
	ai.pSetLayouts = &l;
	VkResult r = d->AllocateDescriptorSets(d->device, &ai, out);
	if (r != VK_SUCCESS) return r;
	f->sets_left--;
	f->descs_left -= n;
	return VK_SUCCESS;
}

// What each FVK_BARRIER_* kind orders: the stages and accesses before the
// barrier and after it.
#define CS VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
#define TR VK_PIPELINE_STAGE_TRANSFER_BIT
#define ALL VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
static const struct {
	VkPipelineStageFlags src, dst;
	VkAccessFlags src_access, dst_access;
} barrier_kinds[] = {
    [FVK_BARRIER_COMPUTE] = {CS, CS, VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT},
    [FVK_BARRIER_TRANSFER_COMPUTE] = {TR, CS, VK_ACCESS_TRANSFER_WRITE_BIT,
                                      VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT},
    [FVK_BARRIER_COMPUTE_TRANSFER] = {CS, TR, VK_ACCESS_SHADER_WRITE_BIT,
                                      VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT},
    [FVK_BARRIER_FULL] = {ALL, ALL, VK_ACCESS_MEMORY_WRITE_BIT, VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT},
    [FVK_BARRIER_HOST_READ] = {ALL, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_MEMORY_WRITE_BIT, VK_ACCESS_HOST_READ_BIT},
};
#undef CS
#undef TR
#undef ALL

static void barrier(fvk_device *d, VkCommandBuffer cmd, uint32_t kind) {
	if (kind >= sizeof barrier_kinds / sizeof barrier_kinds[0]) kind = FVK_BARRIER_FULL;
	VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
	mb.srcAccessMask = barrier_kinds[kind].src_access;
	mb.dstAccessMask = barrier_kinds[kind].dst_access;
	d->CmdPipelineBarrier(cmd, barrier_kinds[kind].src, barrier_kinds[kind].dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

static VkResult ensure_queries(fvk_device *d, fvk_frame *f, uint32_t n) {
	if (n <= f->qcap) return VK_SUCCESS;
	if (f->qpool != VK_NULL_HANDLE) {
		DESTROY(d, DestroyQueryPool, f->qpool, FVK_OBJ_QUERY_POOL);
		f->qpool = VK_NULL_HANDLE;
		f->qcap = 0;
	}
	uint32_t cap = 64;
	while (cap < n) cap *= 2;
	VkQueryPoolCreateInfo ci = {VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
	ci.queryType = VK_QUERY_TYPE_TIMESTAMP;
	ci.queryCount = cap;
	VkResult r = CREATE(d, CreateQueryPool, &ci, &f->qpool, FVK_OBJ_QUERY_POOL);
	if (r != VK_SUCCESS) return r;
	f->qcap = cap;
	return VK_SUCCESS;
}

VkResult fvk_record(fvk_device *d, fvk_frame *f, const fvk_op *ops, uint32_t nops, const uint8_t *push,
                    const fvk_binding *bufs, uint32_t nqueries, int32_t *bad) {
	*bad = -1;
	VkResult r = VK_SUCCESS;
	if (nqueries) {
		r = ensure_queries(d, f, nqueries);
		if (r != VK_SUCCESS) return r;
	}
	VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
	bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
	r = d->BeginCommandBuffer(f->cmd, &bi);
	if (r != VK_SUCCESS) return r;
	// Every submission starts with a full barrier, so work in a submission
	// sees everything written by earlier submissions.
	barrier(d, f->cmd, FVK_BARRIER_FULL);
	if (nqueries) d->CmdResetQueryPool(f->cmd, f->qpool, 0, nqueries);

	VkDescriptorSet last_set = VK_NULL_HANDLE;
	VkDescriptorSetLayout last_layout = VK_NULL_HANDLE;
	const fvk_binding *last_bufs = NULL;
	uint32_t last_n = 0;
	VkPipeline bound = VK_NULL_HANDLE;
	for (uint32_t i = 0; i < nops; i++) {
		const fvk_op *op = &ops[i];
		switch (op->kind) {
		case FVK_OP_DISPATCH: {
			if (op->nbufs > FVK_MAX_BINDINGS) {
				*bad = (int32_t)i;
				return VK_ERROR_INITIALIZATION_FAILED;
			}
			if (bound != op->pipeline) {
				d->CmdBindPipeline(f->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, op->pipeline);
				bound = op->pipeline;
			}
			if (op->nbufs > 0) {
				const fvk_binding *b = bufs + op->buf_off;
				int same = last_set != VK_NULL_HANDLE && last_layout == op->set_layout && last_n == op->nbufs &&
				           memcmp(last_bufs, b, op->nbufs * sizeof *b) == 0;
				if (!same) {
					VkDescriptorSet set;
					r = alloc_set(d, f, op->set_layout, op->nbufs, &set);
					if (r != VK_SUCCESS) {
						*bad = (int32_t)i;
						return r;
					}
					VkDescriptorBufferInfo info[FVK_MAX_BINDINGS];
					VkWriteDescriptorSet w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
					for (uint32_t j = 0; j < op->nbufs; j++) {
						info[j].buffer = b[j].buffer;
						info[j].offset = 0;
						info[j].range = b[j].range;
					}
					w.dstSet = set;
					w.dstBinding = 0;
					w.descriptorCount = op->nbufs;
					w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
					w.pBufferInfo = info;
					d->UpdateDescriptorSets(d->device, 1, &w, 0, NULL);
					last_set = set;
					last_layout = op->set_layout;
					last_bufs = b;
					last_n = op->nbufs;
				}
				d->CmdBindDescriptorSets(f->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, op->layout, 0, 1, &last_set, 0,
				                         NULL);
			}
			if (op->push_size)
				d->CmdPushConstants(f->cmd, op->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, op->push_size,
				                    push + op->push_off);
			if (op->base[0] | op->base[1] | op->base[2]) {
				if (!d->dispatch_base) {
					*bad = (int32_t)i;
					return VK_ERROR_FEATURE_NOT_PRESENT;
				}
				d->CmdDispatchBase(f->cmd, op->base[0], op->base[1], op->base[2], op->groups[0], op->groups[1],
				                   op->groups[2]);
			} else {
				d->CmdDispatch(f->cmd, op->groups[0], op->groups[1], op->groups[2]);
			}
			break;
		}
		case FVK_OP_BARRIER:
			barrier(d, f->cmd, op->arg);
			break;
		case FVK_OP_COPY: {
			VkBufferCopy c = {op->src_off, op->dst_off, op->size};
			d->CmdCopyBuffer(f->cmd, op->src, op->dst, 1, &c);
			break;
		}
		case FVK_OP_FILL:
			d->CmdFillBuffer(f->cmd, op->dst, op->dst_off, op->size, op->arg);
			break;
		case FVK_OP_UPDATE:
			d->CmdUpdateBuffer(f->cmd, op->dst, op->dst_off, op->size, push + op->push_off);
			break;
		case FVK_OP_TIMESTAMP:
			d->CmdWriteTimestamp(f->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, f->qpool, op->arg);
			break;
		default:
			*bad = (int32_t)i;
			return VK_ERROR_INITIALIZATION_FAILED;
		}
	}
	return d->EndCommandBuffer(f->cmd);
}

VkResult fvk_submit(fvk_device *d, fvk_frame *f) {
	VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
	si.commandBufferCount = 1;
	si.pCommandBuffers = &f->cmd;
	return d->QueueSubmit(d->queue, 1, &si, f->fence);
}

VkResult fvk_wait(fvk_device *d, fvk_frame *f, uint64_t timeout_ns) {
	return d->WaitForFences(d->device, 1, &f->fence, VK_TRUE, timeout_ns);
}

VkResult fvk_fence_status(fvk_device *d, fvk_frame *f) { return d->GetFenceStatus(d->device, f->fence); }

VkResult fvk_query_results(fvk_device *d, fvk_frame *f, uint32_t n, uint64_t *out) {
	return d->GetQueryPoolResults(d->device, f->qpool, 0, n, n * sizeof(uint64_t), out, sizeof(uint64_t),
	                              VK_QUERY_RESULT_64_BIT);
}
