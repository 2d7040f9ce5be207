//go:build cgo

package device

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHeadersSelfContained: every Vulkan header the C layer includes
// resolves inside include/ (the vendored 1.3.239 set, vk_video/ included),
// none from the system, so device builds where no Vulkan development
// package is installed.
func TestHeadersSelfContained(t *testing.T) {
	cc := "gcc"
	if out, err := exec.Command("go", "env", "CC").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		cc = strings.Fields(string(out))[0]
	}
	out, err := exec.Command(cc, "-M", "-I", "include", "vk.h").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -M -I include vk.h: %v\n%s", cc, err, out)
	}
	var vendored []string
	for _, dep := range strings.Fields(strings.ReplaceAll(string(out), "\\\n", " ")) {
		if !strings.Contains(dep, "vulkan/") && !strings.Contains(dep, "vk_video/") {
			continue
		}
		if !strings.HasPrefix(filepath.Clean(dep), "include/") {
			t.Errorf("Vulkan header %s resolves outside include/", dep)
			continue
		}
		vendored = append(vendored, dep)
	}
	var video int
	for _, d := range vendored {
		if strings.Contains(d, "vk_video/") {
			video++
		}
	}
	if len(vendored) < 3 || video == 0 {
		t.Errorf("the check saw %d vendored Vulkan headers (%d vk_video): %v", len(vendored), video, vendored)
	}
	t.Logf("vendored headers: %v", vendored)
}
