// Package gate counts the calls in progress on an object (a backend, a
// tensor) so that its Close can refuse new uses, stop the calls that run
// under a context it may cancel (Call), and wait for every use to end. The
// CPU and Vulkan backends and the Vulkan tensors use it; it is a leaf.
package gate
