package engine

// EmulateCoop makes e's prefill products run on the cooperative-matrix
// kernel's software emulation (kernels.Kernels.CoopEmulated), so that the
// engine's use of it is tested on devices without the extension.
func EmulateCoop(e *Engine) { e.k.CoopEmulated = true }
