package vk

/*
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// The binding dlopens "libvulkan.so", which only exists where libvulkan-dev is
// installed, so the loader is opened here under its runtime name and its
// vkGetInstanceProcAddr handed to the binding.
var loader struct {
	once sync.Once
	gipa unsafe.Pointer
	err  error

	// The binding keeps its entry points in C globals filled by
	// vk.InitInstance. They are the loader's instance-independent
	// trampolines, so filling them once, from the first instance, serves
	// every later instance and avoids rewriting them under running calls.
	initOnce sync.Once
	initErr  error
}

func loaderName() string {
	switch runtime.GOOS {
	case "windows":
		return "vulkan-1.dll"
	case "darwin":
		return "libvulkan.1.dylib"
	}
	return "libvulkan.so.1"
}

// load opens the Vulkan loader once per process.
func load() (unsafe.Pointer, error) {
	loader.once.Do(func() {
		name := loaderName()
		gipa, err := openLoader(name)
		if err != nil {
			loader.err = err
			return
		}
		vk.SetGetInstanceProcAddr(gipa)
		if err := vk.Init(); err != nil {
			loader.err = fmt.Errorf("vulkan: initialising the binding from %s: %w", name, err)
			return
		}
		loader.gipa = gipa
	})
	return loader.gipa, loader.err
}

// openLoader opens the named library and returns its vkGetInstanceProcAddr.
func openLoader(name string) (unsafe.Pointer, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var msg [512]C.char
	gipa := C.vkr_load(cname, &msg[0], C.size_t(len(msg)))
	if gipa == nil {
		return nil, fmt.Errorf("vulkan: cannot load %s: %s (install the Vulkan loader, e.g. libvulkan1)", name, C.GoString(&msg[0]))
	}
	return gipa, nil
}

// initBinding must run after the first instance exists: the binding's device
// and instance functions are nil until then and calling one crashes.
func initBinding(inst vk.Instance) error {
	loader.initOnce.Do(func() {
		if err := vk.InitInstance(inst); err != nil {
			loader.initErr = fmt.Errorf("vulkan: loading instance functions: %w", err)
		}
	})
	return loader.initErr
}

// proc looks up an entry point through vkGetInstanceProcAddr; instance 0
// gives the global functions. It returns nil for unknown names.
func proc(instance uint64, name string) unsafe.Pointer {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.vkr_instance_proc(loader.gipa, C.uint64_t(instance), cname)
}

// entry is an entry point to look up and the slot that keeps it.
type entry struct {
	slot *unsafe.Pointer
	name string
}

// resolve fills every slot through get and fails, naming the entry point,
// at the first that the loader or driver does not provide: a nil entry
// point called from C is a segfault, not an error.
func resolve(get func(name string) unsafe.Pointer, entries []entry) error {
	for _, e := range entries {
		if *e.slot = get(e.name); *e.slot == nil {
			return fmt.Errorf("the driver lacks the entry point %s", e.name)
		}
	}
	return nil
}

// loaderVersion is the instance-level Vulkan version the loader supports
// (1.0 when it predates vkEnumerateInstanceVersion).
func loaderVersion() uint32 {
	fn := proc(0, "vkEnumerateInstanceVersion")
	if fn == nil {
		return vk.MakeVersion(1, 0, 0)
	}
	var v C.uint32_t
	if C.vkr_enumerate_instance_version(fn, &v) != 0 {
		return vk.MakeVersion(1, 0, 0)
	}
	return uint32(v)
}
