// vk.h: flashvk's C calling layer over Vulkan.
//
// Everything that touches Vulkan structures lives here and in vk.c: the Go
// side only sees opaque fvk_* structs (allocated with malloc, never in the Go
// heap), plain integers and flat arrays. Non-dispatchable handles are 64-bit
// integers (VK_USE_64_BIT_PTR_DEFINES=0) so that driver handle values never
// masquerade as Go pointers.
//
// The loader is opened with dlopen at run time; no link-time dependency on
// libvulkan exists, so binaries start (and report ErrNoVulkan) on machines
// without it.
#ifndef FLASHVK_VK_H
#define FLASHVK_VK_H

#define VK_NO_PROTOTYPES 1
#define VK_USE_64_BIT_PTR_DEFINES 0
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan_core.h>

// ---- Definitions newer than the vendored 1.3.239 headers -------------------
// Values from the Vulkan registry (vk.xml).
#define FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define FVK_STYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)
#define FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506002)
#define FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV ((VkStructureType)1000593000)
#define FVK_STYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV ((VkStructureType)1000593001)
#define FVK_STYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV ((VkStructureType)1000593002)
#define FVK_STYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR ((VkStructureType)1000141000)

// VkPhysicalDeviceCooperativeMatrixFeaturesKHR
typedef struct fvk_coopmat_features_khr {
	VkStructureType sType;
	void *pNext;
	VkBool32 cooperativeMatrix;
	VkBool32 cooperativeMatrixRobustBufferAccess;
} fvk_coopmat_features_khr;

// VkPhysicalDeviceCooperativeMatrixPropertiesKHR
typedef struct fvk_coopmat_props_khr {
	VkStructureType sType;
	void *pNext;
	VkShaderStageFlags cooperativeMatrixSupportedStages;
} fvk_coopmat_props_khr;

// VkCooperativeMatrixPropertiesKHR (component types/scope are C enums: int32)
typedef struct fvk_coopmat_shape_khr {
	VkStructureType sType;
	void *pNext;
	uint32_t MSize, NSize, KSize;
	int32_t AType, BType, CType, ResultType;
	VkBool32 saturatingAccumulation;
	int32_t scope;
} fvk_coopmat_shape_khr;

// VkPhysicalDeviceCooperativeMatrix2FeaturesNV
typedef struct fvk_coopmat2_features_nv {
	VkStructureType sType;
	void *pNext;
	VkBool32 cooperativeMatrixWorkgroupScope;
	VkBool32 cooperativeMatrixFlexibleDimensions;
	VkBool32 cooperativeMatrixReductions;
	VkBool32 cooperativeMatrixConversions;
	VkBool32 cooperativeMatrixPerElementOperations;
	VkBool32 cooperativeMatrixTensorAddressing;
	VkBool32 cooperativeMatrixBlockLoads;
} fvk_coopmat2_features_nv;

// VkPhysicalDeviceCooperativeMatrix2PropertiesNV
typedef struct fvk_coopmat2_props_nv {
	VkStructureType sType;
	void *pNext;
	uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
	uint32_t cooperativeMatrixFlexibleDimensionsMaxDimension;
	uint32_t cooperativeMatrixWorkgroupScopeReservedSharedMemory;
} fvk_coopmat2_props_nv;

// VkCooperativeMatrixFlexibleDimensionsPropertiesNV
typedef struct fvk_coopmat_flex_nv {
	VkStructureType sType;
	void *pNext;
	uint32_t MGranularity, NGranularity, KGranularity;
	int32_t AType, BType, CType, ResultType;
	VkBool32 saturatingAccumulation;
	int32_t scope;
	uint32_t workgroupInvocations;
} fvk_coopmat_flex_nv;

// VkPhysicalDeviceShaderBfloat16FeaturesKHR
typedef struct fvk_bf16_features_khr {
	VkStructureType sType;
	void *pNext;
	VkBool32 shaderBFloat16Type;
	VkBool32 shaderBFloat16DotProduct;
	VkBool32 shaderBFloat16CooperativeMatrix;
} fvk_bf16_features_khr;

// ---- Object accounting -------------------------------------------------------
enum {
	FVK_OBJ_INSTANCE,
	FVK_OBJ_MESSENGER,
	FVK_OBJ_DEVICE,
	FVK_OBJ_BUFFER,
	FVK_OBJ_MEMORY,
	FVK_OBJ_SHADER_MODULE,
	FVK_OBJ_SET_LAYOUT,
	FVK_OBJ_PIPELINE_LAYOUT,
	FVK_OBJ_PIPELINE,
	FVK_OBJ_PIPELINE_CACHE,
	FVK_OBJ_DESCRIPTOR_POOL,
	FVK_OBJ_COMMAND_POOL,
	FVK_OBJ_FENCE,
	FVK_OBJ_QUERY_POOL,
	FVK_OBJ_COUNT
};

typedef struct fvk_counters {
	int64_t live[FVK_OBJ_COUNT];
	int64_t created[FVK_OBJ_COUNT];
} fvk_counters;

void fvk_global_counters(fvk_counters *out);
// forward declaration; defined below
struct fvk_instance;
void fvk_instance_counters(struct fvk_instance *in, fvk_counters *out);

// ---- Loader -------------------------------------------------------------------
// fvk_load opens the Vulkan loader (path, or libvulkan.so.1 then
// libvulkan.so when path is NULL or empty) unless one is open already; the
// caller serialises calls. Returns 0 on success; on failure -1 and the
// reason in err.
int fvk_load(const char *path, char *err, size_t errlen);
uint32_t fvk_loader_version(void);
int fvk_layer_available(const char *name);

// ---- Instance -------------------------------------------------------------------
#define FVK_MAX_PHYS 16

typedef struct fvk_instance {
	VkInstance instance;
	uint32_t api;
	uintptr_t log_handle;
	VkDebugUtilsMessengerEXT messenger;
	uint32_t nphys;
	VkPhysicalDevice phys[FVK_MAX_PHYS];
	fvk_counters cnt;
	PFN_vkDestroyInstance DestroyInstance;
	PFN_vkEnumeratePhysicalDevices EnumeratePhysicalDevices;
	PFN_vkGetPhysicalDeviceProperties GetPhysicalDeviceProperties;
	PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2;
	PFN_vkGetPhysicalDeviceFeatures GetPhysicalDeviceFeatures;
	PFN_vkGetPhysicalDeviceFeatures2 GetPhysicalDeviceFeatures2;
	PFN_vkGetPhysicalDeviceMemoryProperties GetPhysicalDeviceMemoryProperties;
	PFN_vkGetPhysicalDeviceQueueFamilyProperties GetPhysicalDeviceQueueFamilyProperties;
	PFN_vkEnumerateDeviceExtensionProperties EnumerateDeviceExtensionProperties;
	PFN_vkCreateDevice CreateDevice;
	PFN_vkGetDeviceProcAddr GetDeviceProcAddr;
	PFN_vkCreateDebugUtilsMessengerEXT CreateDebugUtilsMessengerEXT;
	PFN_vkDestroyDebugUtilsMessengerEXT DestroyDebugUtilsMessengerEXT;
	PFN_vkVoidFunction GetCoopMatPropsKHR;
	PFN_vkVoidFunction GetCoopMatFlexPropsNV;
} fvk_instance;

// fvk_instance_create creates an instance (validation != 0: enable
// VK_LAYER_KHRONOS_validation and route messages to the Go logger identified
// by log_handle) and enumerates physical devices.
VkResult fvk_instance_create(int validation, uintptr_t log_handle, fvk_instance **out);
// fvk_instance_destroy destroys the instance and copies its final counters
// into final (may be NULL).
void fvk_instance_destroy(fvk_instance *in, fvk_counters *final);

// ---- Physical device info ----------------------------------------------------
#define FVK_MAX_COOPMAT 64
#define FVK_MAX_FLEX 32

typedef struct fvk_info {
	uint32_t api_version, driver_version, vendor_id, device_id, device_type;
	char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
	uint8_t pipeline_cache_uuid[VK_UUID_SIZE];
	uint32_t driver_id;
	char driver_name[VK_MAX_DRIVER_NAME_SIZE];
	char driver_info[VK_MAX_DRIVER_INFO_SIZE];

	uint32_t subgroup_size, subgroup_stages, subgroup_ops;
	uint32_t min_subgroup, max_subgroup, max_wg_subgroups, required_subgroup_stages;
	VkBool32 subgroup_size_control, compute_full_subgroups, subgroup_ext_types;

	uint32_t max_shared, max_wg_size[3], max_wg_invocations, max_wg_count[3], max_push;
	uint64_t max_alloc, max_buffer_size, min_storage_align;
	uint32_t compute_units; // VK_NV_shader_sm_builtins SMs or VK_AMD_shader_core_properties CUs; 0 unknown
	uint32_t max_storage_range, max_alloc_count, max_storage_buffers;
	uint32_t nheaps;
	uint64_t heap_size[VK_MAX_MEMORY_HEAPS];
	uint32_t heap_flags[VK_MAX_MEMORY_HEAPS];
	uint32_t ntypes;
	uint32_t type_flags[VK_MAX_MEMORY_TYPES];
	uint32_t type_heap[VK_MAX_MEMORY_TYPES];

	VkBool32 shader_float16, shader_int8, shader_int16, shader_int64, shader_float64;
	VkBool32 storage16, storage8, push16;
	VkBool32 vmm, vmm_device_scope;
	VkBool32 bda; // bufferDeviceAddress
	VkBool32 bf16_type, bf16_dot, bf16_coopmat;
	VkBool32 coopmat, coopmat_robust;
	// exec_props: VK_KHR_pipeline_executable_properties with
	// pipelineExecutableInfo (compiler statistics of pipelines).
	VkBool32 exec_props;
	uint32_t coopmat_stages;
	fvk_coopmat2_features_nv coopmat2;
	fvk_coopmat2_props_nv coopmat2_props;
	uint32_t ncoopmat, nflex;
	fvk_coopmat_shape_khr coopmats[FVK_MAX_COOPMAT];
	fvk_coopmat_flex_nv flex[FVK_MAX_FLEX];

	float timestamp_period;
	uint32_t timestamp_valid_bits;
	uint32_t queue_family; // UINT32_MAX: no compute queue

	// Extensions that must be enabled to use the features above (0 where
	// the feature is core at the effective API version or unsupported).
	uint8_t ext_16bit, ext_8bit, ext_f16i8, ext_subgroup_ext_types, ext_vmm;
	uint8_t ext_size_control, ext_coopmat, ext_coopmat2, ext_bf16, ext_portability;
	uint8_t ext_maintenance4, ext_bda;
	// ext_exec_props is never set by fvk_query: statistics slow pipeline
	// creation, so the caller sets it (where exec_props) to ask for them.
	uint8_t ext_exec_props;
} fvk_info;

void fvk_query(fvk_instance *in, uint32_t index, fvk_info *out);

// ---- Logical device -----------------------------------------------------------
enum { FVK_MEM_DEVICE = 0, FVK_MEM_UPLOAD = 1, FVK_MEM_DOWNLOAD = 2 };

typedef struct fvk_device {
	fvk_instance *in;
	VkPhysicalDevice phys;
	VkDevice device;
	VkQueue queue;
	uint32_t family;
	VkPipelineCache cache;
	VkPhysicalDeviceMemoryProperties mem;
	uint32_t size_control; // RequiredSubgroupSize usable for compute
	uint32_t bda;          // bufferDeviceAddress enabled and vkGetBufferDeviceAddress loaded
	// dispatch_base: vkCmdDispatchBase (core 1.1) loaded; every pipeline is
	// then created with VK_PIPELINE_CREATE_DISPATCH_BASE_BIT.
	uint32_t dispatch_base;
	// capture_stats: VK_KHR_pipeline_executable_properties enabled and its
	// entry points loaded; every pipeline is then created with
	// VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR.
	uint32_t capture_stats;

	PFN_vkDestroyDevice DestroyDevice;
	PFN_vkGetDeviceQueue GetDeviceQueue;
	PFN_vkDeviceWaitIdle DeviceWaitIdle;
	PFN_vkQueueSubmit QueueSubmit;
	PFN_vkCreateBuffer CreateBuffer;
	PFN_vkDestroyBuffer DestroyBuffer;
	PFN_vkGetBufferMemoryRequirements GetBufferMemoryRequirements;
	PFN_vkAllocateMemory AllocateMemory;
	PFN_vkFreeMemory FreeMemory;
	PFN_vkBindBufferMemory BindBufferMemory;
	PFN_vkMapMemory MapMemory;
	PFN_vkUnmapMemory UnmapMemory;
	PFN_vkFlushMappedMemoryRanges FlushMappedMemoryRanges;
	PFN_vkInvalidateMappedMemoryRanges InvalidateMappedMemoryRanges;
	PFN_vkCreateShaderModule CreateShaderModule;
	PFN_vkDestroyShaderModule DestroyShaderModule;
	PFN_vkCreateDescriptorSetLayout CreateDescriptorSetLayout;
	PFN_vkDestroyDescriptorSetLayout DestroyDescriptorSetLayout;
	PFN_vkCreatePipelineLayout CreatePipelineLayout;
	PFN_vkDestroyPipelineLayout DestroyPipelineLayout;
	PFN_vkCreateComputePipelines CreateComputePipelines;
	PFN_vkDestroyPipeline DestroyPipeline;
	PFN_vkCreatePipelineCache CreatePipelineCache;
	PFN_vkDestroyPipelineCache DestroyPipelineCache;
	PFN_vkGetPipelineCacheData GetPipelineCacheData;
	PFN_vkMergePipelineCaches MergePipelineCaches;
	PFN_vkCreateDescriptorPool CreateDescriptorPool;
	PFN_vkDestroyDescriptorPool DestroyDescriptorPool;
	PFN_vkResetDescriptorPool ResetDescriptorPool;
	PFN_vkAllocateDescriptorSets AllocateDescriptorSets;
	PFN_vkUpdateDescriptorSets UpdateDescriptorSets;
	PFN_vkCreateCommandPool CreateCommandPool;
	PFN_vkDestroyCommandPool DestroyCommandPool;
	PFN_vkResetCommandPool ResetCommandPool;
	PFN_vkAllocateCommandBuffers AllocateCommandBuffers;
	PFN_vkBeginCommandBuffer BeginCommandBuffer;
	PFN_vkEndCommandBuffer EndCommandBuffer;
	PFN_vkCmdBindPipeline CmdBindPipeline;
	PFN_vkCmdBindDescriptorSets CmdBindDescriptorSets;
	PFN_vkCmdPushConstants CmdPushConstants;
	PFN_vkCmdDispatch CmdDispatch;
	PFN_vkCmdDispatchBase CmdDispatchBase; // NULL unless dispatch_base
	PFN_vkCmdPipelineBarrier CmdPipelineBarrier;
	PFN_vkCmdCopyBuffer CmdCopyBuffer;
	PFN_vkCmdFillBuffer CmdFillBuffer;
	PFN_vkCmdUpdateBuffer CmdUpdateBuffer;
	PFN_vkCmdWriteTimestamp CmdWriteTimestamp;
	PFN_vkCmdResetQueryPool CmdResetQueryPool;
	PFN_vkCreateQueryPool CreateQueryPool;
	PFN_vkDestroyQueryPool DestroyQueryPool;
	PFN_vkGetQueryPoolResults GetQueryPoolResults;
	PFN_vkCreateFence CreateFence;
	PFN_vkDestroyFence DestroyFence;
	PFN_vkWaitForFences WaitForFences;
	PFN_vkResetFences ResetFences;
	PFN_vkGetFenceStatus GetFenceStatus;
	// vkGetBufferDeviceAddress (core 1.2) or vkGetBufferDeviceAddressKHR;
	// NULL unless bda.
	PFN_vkGetBufferDeviceAddress GetBufferDeviceAddress;
	// NULL unless capture_stats.
	PFN_vkGetPipelineExecutablePropertiesKHR GetPipelineExecutablePropertiesKHR;
	PFN_vkGetPipelineExecutableStatisticsKHR GetPipelineExecutableStatisticsKHR;
} fvk_device;

// fvk_device_create creates the logical device on physical device index with
// every feature from info that flashvk uses enabled, one queue from
// info->queue_family and a pipeline cache seeded with cache_data. The
// caller clears info->bda and info->ext_bda to leave buffer device
// addresses off, and sets info->ext_exec_props to capture pipeline
// statistics.
VkResult fvk_device_create(fvk_instance *in, uint32_t index, const fvk_info *info,
                           const void *cache_data, size_t cache_size, fvk_device **out);
void fvk_device_destroy(fvk_device *d);
VkResult fvk_device_wait_idle(fvk_device *d);
VkResult fvk_pipeline_cache_data(fvk_device *d, size_t *size, void *data);
// fvk_pipeline_cache_merge merges a serialized cache into the device's cache.
VkResult fvk_pipeline_cache_merge(fvk_device *d, const void *data, size_t size);

// ---- Buffers ---------------------------------------------------------------------
typedef struct fvk_buffer {
	VkBuffer buffer;
	VkDeviceMemory memory;
	void *mapped;      // non-NULL for FVK_MEM_UPLOAD / FVK_MEM_DOWNLOAD
	uint32_t coherent; // mapped memory is HOST_COHERENT
	uint64_t size;
	uint64_t atom;     // nonCoherentAtomSize
	uint64_t address;  // device address; 0 unless FVK_MEM_DEVICE on a device with bda
	uint64_t over_heap; // set by a refused fvk_buffer_create: the size of the heap the buffer exceeds
} fvk_buffer;

// fvk_buffer_create creates a buffer of size bytes bound to its own memory
// of kind. On a device with bda, FVK_MEM_DEVICE buffers are created for
// shader device addresses and out->address is set. A buffer larger than
// the memory heap it would come from fails with
// VK_ERROR_OUT_OF_DEVICE_MEMORY without reaching the driver, and
// out->over_heap is then that heap's size.
VkResult fvk_buffer_create(fvk_device *d, uint64_t size, int kind, fvk_buffer *out);
void fvk_buffer_destroy(fvk_device *d, fvk_buffer *b);
VkResult fvk_buffer_flush(fvk_device *d, fvk_buffer *b, uint64_t size);
VkResult fvk_buffer_invalidate(fvk_device *d, fvk_buffer *b, uint64_t size);

// ---- Pipelines -------------------------------------------------------------------
#define FVK_MAX_BINDINGS 64

VkResult fvk_set_layout_create(fvk_device *d, uint32_t nbindings, VkDescriptorSetLayout *out);
void fvk_set_layout_destroy(fvk_device *d, VkDescriptorSetLayout l);
VkResult fvk_pipeline_layout_create(fvk_device *d, VkDescriptorSetLayout set, uint32_t push_size,
                                    VkPipelineLayout *out);
void fvk_pipeline_layout_destroy(fvk_device *d, VkPipelineLayout l);
VkResult fvk_pipeline_create(fvk_device *d, const uint32_t *code, size_t code_size, const char *entry,
                             const uint32_t *spec_ids, const uint32_t *spec_vals, uint32_t nspec,
                             VkPipelineLayout layout, uint32_t subgroup_size, uint32_t full_subgroups,
                             VkPipeline *out);
void fvk_pipeline_destroy(fvk_device *d, VkPipeline p);

// Compiler statistics (VK_KHR_pipeline_executable_properties; the device
// must have capture_stats). Values of every format are kept as 64 bits:
// b32 as 0/1, i64 and u64 as they are, f64 as its IEEE bits.
typedef struct fvk_executable {
	char name[VK_MAX_DESCRIPTION_SIZE];
	char description[VK_MAX_DESCRIPTION_SIZE];
	uint32_t stages, subgroup_size;
} fvk_executable;

typedef struct fvk_statistic {
	char name[VK_MAX_DESCRIPTION_SIZE];
	char description[VK_MAX_DESCRIPTION_SIZE];
	int32_t format; // VkPipelineExecutableStatisticFormatKHR
	uint64_t bits;
} fvk_statistic;

// fvk_pipeline_executables sets *out to a malloc'd array of the *count
// executables of p (the caller frees it; NULL when none).
VkResult fvk_pipeline_executables(fvk_device *d, VkPipeline p, uint32_t *count, fvk_executable **out);
// fvk_pipeline_statistics sets *out to a malloc'd array of the *count
// statistics of executable index of p (the caller frees it; NULL when none).
VkResult fvk_pipeline_statistics(fvk_device *d, VkPipeline p, uint32_t index, uint32_t *count, fvk_statistic **out);

// ---- Frames: everything one submission needs ------------------------------------
typedef struct fvk_frame {
	VkCommandPool pool;
	VkCommandBuffer cmd;
	VkFence fence;
	VkDescriptorPool *dpools;
	uint32_t ndpools, capdpools, curdpool;
	uint32_t sets_left, descs_left;
	VkQueryPool qpool;
	uint32_t qcap;
} fvk_frame;

VkResult fvk_frame_create(fvk_device *d, fvk_frame **out);
void fvk_frame_destroy(fvk_device *d, fvk_frame *f);
VkResult fvk_frame_reset(fvk_device *d, fvk_frame *f);

enum {
	FVK_OP_DISPATCH = 1,
	FVK_OP_BARRIER = 2,
	FVK_OP_COPY = 3,
	FVK_OP_FILL = 4,
	FVK_OP_TIMESTAMP = 5,
	FVK_OP_UPDATE = 6, // dst at dst_off ← size bytes of the push arena at push_off
};

enum {
	FVK_BARRIER_COMPUTE = 0,       // compute write -> compute read/write
	FVK_BARRIER_TRANSFER_COMPUTE,  // transfer write -> compute read/write
	FVK_BARRIER_COMPUTE_TRANSFER,  // compute write -> transfer read/write
	FVK_BARRIER_FULL,              // all writes -> all reads/writes
	FVK_BARRIER_HOST_READ,         // all writes -> host read
};

typedef struct fvk_op {
	uint32_t kind;
	uint32_t arg;       // barrier kind / timestamp query index / fill word
	uint32_t nbufs;     // dispatch: buffers bound at 0..nbufs-1
	uint32_t push_size; // dispatch
	uint32_t groups[3]; // dispatch
	uint32_t base[3];   // dispatch: first workgroup (vkCmdDispatchBase when not 0)
	uint64_t push_off; // dispatch: offset into the push arena
	uint64_t buf_off;  // dispatch: index into the buffer array
	uint64_t dst_off, src_off, size;
	VkPipeline pipeline;
	VkPipelineLayout layout;
	VkDescriptorSetLayout set_layout;
	VkBuffer dst, src;
} fvk_op;

// fvk_binding is one storage buffer of a dispatch: its descriptor covers
// bytes [0, range) of buffer.
typedef struct fvk_binding {
	VkBuffer buffer;
	uint64_t range;
} fvk_binding;

// fvk_record records ops into the frame's command buffer; dispatches bind
// bufs[op->buf_off .. op->buf_off+op->nbufs). On failure *bad is the index
// of the offending op (or -1).
VkResult fvk_record(fvk_device *d, fvk_frame *f, const fvk_op *ops, uint32_t nops,
                    const uint8_t *push, const fvk_binding *bufs, uint32_t nqueries, int32_t *bad);
VkResult fvk_submit(fvk_device *d, fvk_frame *f);
VkResult fvk_wait(fvk_device *d, fvk_frame *f, uint64_t timeout_ns);
VkResult fvk_fence_status(fvk_device *d, fvk_frame *f);
VkResult fvk_query_results(fvk_device *d, fvk_frame *f, uint32_t n, uint64_t *out);

#endif
