package vk

/*
#include "cvk.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

const validationLayer = "VK_LAYER_KHRONOS_validation"

// Debug-utils severities (VkDebugUtilsMessageSeverityFlagBitsEXT) and types.
const (
	severityWarning = 0x100
	severityError   = 0x1000
	// general | validation | performance
	messageTypesAll = 0x1 | 0x2 | 0x4
)

// instance owns a VkInstance and, with validation, the messenger that
// records every warning and error the layer reports.
type instance struct {
	h       vk.Instance
	id      uint64
	version uint32 // the API version the instance was created with
	// layerVersion is the validation layer's specVersion, 0 without
	// validation.
	layerVersion uint32

	log       *messageLog
	logHandle cgo.Handle
	messenger uint64
	claimed   bool // a device has been opened on it (claim), under instances.mu
}

// messageLog collects validation messages; the layer may call back on any
// thread, hence the lock.
type messageLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *messageLog) add(m string) {
	l.mu.Lock()
	l.msgs = append(l.msgs, m)
	l.mu.Unlock()
}

func (l *messageLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

//export goDebugMessage
func goDebugMessage(user C.uintptr_t, severity C.uint32_t, data unsafe.Pointer) {
	cb := (*debugUtilsMessengerCallbackData)(data)
	level := "WARNING"
	if severity&severityError != 0 {
		level = "ERROR"
	}
	msg := "(no message)"
	if cb.pMessage != nil {
		msg = C.GoString((*C.char)(unsafe.Pointer(cb.pMessage)))
	}
	cgo.Handle(user).Value().(*messageLog).add(level + ": " + msg)
}

// cstr returns s NUL-terminated, as the binding passes Go strings to C
// without adding a terminator.
func cstr(s string) string { return s + "\x00" }

// instanceLayers maps the installed layers to their specVersion.
func instanceLayers() (map[string]uint32, error) {
	var n uint32
	if err := check("enumerating instance layers", int32(paused(func() vk.Result { return vk.EnumerateInstanceLayerProperties(&n, nil) }))); err != nil {
		return nil, err
	}
	props := make([]vk.LayerProperties, n)
	if err := check("enumerating instance layers", int32(paused(func() vk.Result { return vk.EnumerateInstanceLayerProperties(&n, props) }))); err != nil {
		return nil, err
	}
	have := make(map[string]uint32, n)
	for i := range props[:n] {
		props[i].Deref()
		have[vk.ToString(props[i].LayerName[:])] = props[i].SpecVersion
	}
	return have, nil
}

// instanceExtensions lists the instance extensions of the implementation
// and implicit layers (layer ""), or those a layer provides.
func instanceExtensions(layer string) (map[string]bool, error) {
	var n uint32
	if layer != "" {
		layer = cstr(layer)
	}
	if err := check("enumerating instance extensions", int32(paused(func() vk.Result { return vk.EnumerateInstanceExtensionProperties(layer, &n, nil) }))); err != nil {
		return nil, err
	}
	props := make([]vk.ExtensionProperties, n)
	if err := check("enumerating instance extensions", int32(paused(func() vk.Result { return vk.EnumerateInstanceExtensionProperties(layer, &n, props) }))); err != nil {
		return nil, err
	}
	return extensionSet(props[:n]), nil
}

// extensionSet returns the names of props as a set.
func extensionSet(props []vk.ExtensionProperties) map[string]bool {
	have := make(map[string]bool, len(props))
	for i := range props {
		props[i].Deref()
		have[vk.ToString(props[i].ExtensionName[:])] = true
	}
	return have
}

// instances holds the process's instances, one for each validation setting,
// created on first use and never destroyed. NVIDIA's driver (580) fails
// every vkCreateInstance after the thirtieth of a process with
// VK_ERROR_INCOMPATIBLE_DRIVER, however many were destroyed since, so a
// process that opens devices one after another (a bench sweep, a test
// binary) would lose the GPU; devices come and go, their instance stays.
var instances struct {
	mu sync.Mutex
	m  map[instanceKey]*instance
}

type instanceKey struct{ validation, gpuAssisted bool }

// sharedInstance returns the process's instance for the validation
// settings, creating it on first use. A failed creation is not kept: the
// next call tries again.
func sharedInstance(validation, gpuAssisted bool) (*instance, error) {
	instances.mu.Lock()
	defer instances.mu.Unlock()
	k := instanceKey{validation, gpuAssisted}
	if in := instances.m[k]; in != nil {
		return in, nil
	}
	in, err := newInstance(validation, gpuAssisted)
	if err != nil {
		return nil, err
	}
	if instances.m == nil {
		instances.m = map[instanceKey]*instance{}
	}
	instances.m[k] = in
	return in, nil
}

// newInstance creates an instance for the newest API version up to 1.3 that
// the loader offers. With validation it enables the Khronos layer and
// debug-utils, and fails when the layer is not installed.
func newInstance(validation, gpuAssisted bool) (*instance, error) {
	if _, err := load(); err != nil {
		return nil, err
	}
	in := &instance{version: min(loaderVersion(), vk.MakeVersion(1, 3, 0))}
	exts, err := instanceExtensions("")
	if err != nil {
		return nil, err
	}
	var extNames, layerNames []string
	var flags vk.InstanceCreateFlags
	// MoltenVK only shows up when the application opts into portability
	// drivers.
	if exts["VK_KHR_portability_enumeration"] {
		extNames = append(extNames, cstr("VK_KHR_portability_enumeration"))
		flags |= 0x1 // VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
	}

	var pin runtime.Pinner
	defer pin.Unpin()
	var next unsafe.Pointer
	if validation {
		layers, err := instanceLayers()
		if err != nil {
			return nil, err
		}
		if _, ok := layers[validationLayer]; !ok {
			return nil, fmt.Errorf("vulkan: validation requested but %s is not installed (install the Vulkan validation layers, e.g. vulkan-validationlayers)", validationLayer)
		}
		layerNames = append(layerNames, cstr(validationLayer))
		in.layerVersion = layers[validationLayer]
		extNames = append(extNames, cstr("VK_EXT_debug_utils"))
		in.log = &messageLog{}
		in.logHandle = cgo.NewHandle(in.log)
		// Chained into the create info, this messenger also sees messages
		// from vkCreateInstance and vkDestroyInstance themselves.
		info := messengerInfo(in.logHandle)
		pin.Pin(info)
		next = unsafe.Pointer(info)
		// Synchronization validation reports a missing barrier between
		// dependent dispatches (read after write and the like), which the
		// engine elides where it proves them independent; lavapipe would
		// run such a bug correctly most of the time, a GPU would not.
		if lexts, err := instanceExtensions(validationLayer); err == nil && lexts["VK_EXT_validation_features"] {
			extNames = append(extNames, cstr("VK_EXT_validation_features"))
			enables := &[2]uint32{validationSync, validationGPUAssisted}
			n := uint32(1)
			if gpuAssisted {
				n = 2
			}
			pin.Pin(enables)
			vf := &validationFeatures{sType: stValidationFeatures, pNext: next,
				enabledValidationFeatureCount: n, pEnabledValidationFeatures: unsafe.Pointer(enables)}
			pin.Pin(vf)
			next = unsafe.Pointer(vf)
		} else if gpuAssisted {
			return nil, fmt.Errorf("vulkan: GPU-assisted validation requested but %s lacks VK_EXT_validation_features", validationLayer)
		}
	}

	app := &vk.ApplicationInfo{
		SType:            vk.StructureTypeApplicationInfo,
		PApplicationName: cstr("vkinfer"),
		PEngineName:      cstr("vkinfer"),
		ApiVersion:       in.version,
	}
	ci := &vk.InstanceCreateInfo{
		SType:                   vk.StructureTypeInstanceCreateInfo,
		PNext:                   next,
		Flags:                   flags,
		PApplicationInfo:        app,
		EnabledLayerCount:       uint32(len(layerNames)),
		PpEnabledLayerNames:     layerNames,
		EnabledExtensionCount:   uint32(len(extNames)),
		PpEnabledExtensionNames: extNames,
	}
	var h vk.Instance // a local: cgo refuses pointers into structs holding Go pointers
	if r := int32(paused(func() vk.Result { return vk.CreateInstance(ci, nil, &h) })); r != resSuccess {
		in.releaseLog()
		if r == resIncompatibleDriver {
			// What the loader returns when it finds no driver at all.
			return nil, fmt.Errorf("vulkan: no compatible Vulkan driver found (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER); install one, e.g. mesa-vulkan-drivers or the GPU vendor's driver")
		}
		return nil, check("creating instance", r)
	}
	in.h = h
	in.id = uint64(uintptr(unsafe.Pointer(in.h)))
	if err := initBinding(in.h); err != nil {
		in.destroy()
		return nil, err
	}
	if validation {
		if err := in.createMessenger(); err != nil {
			in.destroy()
			return nil, err
		}
	}
	return in, nil
}

func messengerInfo(h cgo.Handle) *debugUtilsMessengerCreateInfo {
	return &debugUtilsMessengerCreateInfo{
		sType:           stDebugUtilsMessengerCreateInfo,
		messageSeverity: severityWarning | severityError,
		messageType:     messageTypesAll,
		pfnUserCallback: C.vkr_debug_callback(),
		pUserData:       uintptr(h),
	}
}

func (in *instance) createMessenger() error {
	fn := proc(in.id, "vkCreateDebugUtilsMessengerEXT")
	if fn == nil {
		return fmt.Errorf("vulkan: VK_EXT_debug_utils is enabled but vkCreateDebugUtilsMessengerEXT is missing")
	}
	info := messengerInfo(in.logHandle)
	var pin runtime.Pinner
	pin.Pin(info)
	defer pin.Unpin()
	var m C.uint64_t
	if err := check("creating debug messenger", int32(C.vkr_create_messenger(fn, C.uint64_t(in.id), unsafe.Pointer(info), &m))); err != nil {
		return err
	}
	in.messenger = uint64(m)
	return nil
}

// messages returns what the validation layer reported from message from
// on, up to to (-1: all so far).
func (in *instance) messages(from, to int) []string {
	if in.log == nil {
		return nil
	}
	all := in.log.all()
	if to < 0 || to > len(all) {
		to = len(all)
	}
	if from > to {
		return nil
	}
	return all[from:to]
}

// claim returns where a new device's messages start in the log: 0 for the
// instance's first device, so that it answers for the instance's creation
// too, else the messages so far.
func (in *instance) claim() int {
	instances.mu.Lock()
	first := !in.claimed
	in.claimed = true
	instances.mu.Unlock()
	if first {
		return 0
	}
	return in.logged()
}

// logged is how many validation messages the instance has recorded.
func (in *instance) logged() int {
	if in.log == nil {
		return 0
	}
	in.log.mu.Lock()
	defer in.log.mu.Unlock()
	return len(in.log.msgs)
}

func (in *instance) destroy() {
	if in.messenger != 0 {
		// A loader that created the messenger has the destructor too; if it
		// somehow does not, leaking the messenger beats calling nil.
		if fn := proc(in.id, "vkDestroyDebugUtilsMessengerEXT"); fn != nil {
			C.vkr_destroy_messenger(fn, C.uint64_t(in.id), C.uint64_t(in.messenger))
		}
		in.messenger = 0
	}
	vk.DestroyInstance(in.h, nil)
	in.releaseLog()
}

// releaseLog drops the callback's handle; the log itself stays readable.
func (in *instance) releaseLog() {
	if in.logHandle != 0 {
		in.logHandle.Delete()
		in.logHandle = 0
	}
}
