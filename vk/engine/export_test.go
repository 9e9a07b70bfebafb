package engine

import "github.com/vkinfer/vkinfer/vk/flashattn"

// EmulateCoop makes e's prefill products and prefill attention run on the
// cooperative-matrix kernels' software emulation (kernels.Kernels.
// CoopEmulated, flashattn.Options.CoopEmulated), so that the engine's use
// of them is tested on devices without the extension.
func EmulateCoop(e *Engine) error {
	e.k.CoopEmulated = true
	_, prefill := e.o.Tune.FlashAttn(e.o.Wave)
	prefill.CoopEmulated = true
	fa, err := flashattn.New(e.dev, prefill)
	if err != nil {
		return err
	}
	e.faPre.Close()
	e.faPre = fa
	return nil
}

// EmulateCoopInt8 is EmulateCoop with the products' integer variant on
// (Options.CoopInt8), which New refuses on a device without cooperative
// matrices.
func EmulateCoopInt8(e *Engine) error {
	if err := EmulateCoop(e); err != nil {
		return err
	}
	e.k.CoopInt8 = true
	return nil
}

// LimitMemory makes e's Reserve see at most n bytes of free device memory,
// so that a test stands for a device smaller than the one at hand.
func LimitMemory(e *Engine, n uint64) { e.memLimit = n }
