package vk

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// pipelineCache is the device's VkPipelineCache, loaded from and saved to a
// file under os.UserCacheDir()/vkinfer named by the device UUID and driver
// version, so a driver update starts afresh.
type pipelineCache struct {
	h      vk.PipelineCache
	path   string // "" when there is no cache directory
	loaded bool   // whether the file's contents were accepted
	dirty  bool   // a pipeline was compiled since loading
}

func cachePath(info DeviceInfo) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "vkinfer", fmt.Sprintf("pipelines-%x-%08x.bin", info.UUID, info.DriverVersion))
}

// validCacheData checks the header Vulkan defines for cache data
// (VkPipelineCacheHeaderVersionOne) against this device. Drivers are meant
// to reject foreign data themselves, but a truncated or garbled file is
// cheaper to refuse here than to trust to every driver.
func validCacheData(b []byte, p *physical) bool {
	const headerLen = 32
	if len(b) < headerLen {
		return false
	}
	le := binary.LittleEndian
	size, version := le.Uint32(b[0:]), le.Uint32(b[4:])
	return size >= headerLen && int(size) <= len(b) && version == 1 &&
		le.Uint32(b[8:]) == p.info.VendorID && le.Uint32(b[12:]) == p.info.DeviceID &&
		bytes.Equal(b[16:32], p.cacheUUID[:])
}

// openPipelineCache creates the cache, seeded from the file when it holds
// valid data for this device. Failing that it starts empty: the cache only
// saves compile time.
func openPipelineCache(d *Device) pipelineCache {
	c := pipelineCache{path: cachePath(d.info)}
	var data []byte
	if c.path != "" {
		if b, err := os.ReadFile(c.path); err == nil && validCacheData(b, d.phys) {
			data = b
		}
	}
	if c.create(d, data) {
		c.loaded = data != nil
		return c
	}
	c.create(d, nil)
	return c
}

func (c *pipelineCache) create(d *Device, data []byte) bool {
	ci := &vk.PipelineCacheCreateInfo{SType: vk.StructureTypePipelineCacheCreateInfo}
	var pin runtime.Pinner
	defer pin.Unpin()
	if len(data) > 0 {
		pin.Pin(&data[0])
		ci.InitialDataSize = uint(len(data))
		ci.PInitialData = unsafe.Pointer(&data[0])
	}
	var h vk.PipelineCache
	ok := vk.CreatePipelineCache(d.h, ci, nil, &h) == vk.Success
	c.h = h
	return ok
}

// close saves the cache when pipelines were compiled, then destroys it.
// Saving is best effort: an unwritable cache directory only costs compile
// time on the next run.
func (c *pipelineCache) close(d *Device) {
	if c.h == vk.NullPipelineCache {
		return
	}
	if c.dirty && c.path != "" {
		if data := c.data(d); data != nil {
			writeFileAtomic(c.path, data)
		}
	}
	vk.DestroyPipelineCache(d.h, c.h, nil)
	c.h = vk.NullPipelineCache
}

func (c *pipelineCache) data(d *Device) []byte {
	var n uint
	if vk.GetPipelineCacheData(d.h, c.h, &n, nil) != vk.Success || n == 0 {
		return nil
	}
	buf := make([]byte, n)
	if vk.GetPipelineCacheData(d.h, c.h, &n, unsafe.Pointer(&buf[0])) != vk.Success {
		return nil
	}
	return buf[:n]
}

// writeFileAtomic writes through a temporary file and a rename so that a
// concurrent reader never sees half a cache.
func writeFileAtomic(path string, data []byte) {
	if os.MkdirAll(filepath.Dir(path), 0o755) != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pipelines-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		os.Remove(tmp.Name())
	}
}
