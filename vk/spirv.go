package vk

import (
	"encoding/binary"
	"fmt"
)

// SPIR-V opcodes, decorations and modes that determine a compute shader's
// workgroup size.
const (
	spvMagic             = 0x07230203
	opEntryPoint         = 15
	opExecutionMode      = 16
	opConstant           = 43
	opConstantComposite  = 44
	opSpecConstant       = 50
	opSpecConstComposite = 51
	opDecorate           = 71
	opExecutionModeID    = 331
	decSpecID            = 1
	decBuiltIn           = 11
	builtInWorkgroupSize = 25
	modeLocalSize        = 17
	modeLocalSizeID      = 38
	execModelGLCompute   = 5
)

// spirvWords checks the header and returns the module as words.
func spirvWords(code []byte) ([]uint32, error) {
	if len(code) < 20 || len(code)%4 != 0 {
		return nil, fmt.Errorf("SPIR-V is %d bytes, not a whole number of words with a header", len(code))
	}
	w := make([]uint32, len(code)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(code[4*i:])
	}
	if w[0] != spvMagic {
		return nil, fmt.Errorf("SPIR-V magic is %#x, want %#x (wrong file or byte order)", w[0], spvMagic)
	}
	return w, nil
}

// localSize finds the workgroup size of the module's GLCompute entry point,
// applying the specialization constants in spec (constant_id i = spec[i]).
// It is what the driver will use, so Pipeline can check it against the
// device limits and the required subgroup size before creating anything.
func localSize(words []uint32, spec []uint32) ([3]uint32, error) {
	var (
		size      [3]uint32
		sizeIDs   [3]uint32
		haveSize  bool
		haveIDs   bool
		entry     uint32
		haveEntry bool
		builtIn   uint32 // the constant decorated BuiltIn WorkgroupSize
		specIDs   = map[uint32]uint32{}
		scalars   = map[uint32]uint32{}
		composite = map[uint32][]uint32{}
	)
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || i+n > len(words) {
			return size, fmt.Errorf("SPIR-V instruction at word %d has a bad length", i)
		}
		args := words[i+1 : i+n]
		switch {
		case op == opEntryPoint && len(args) >= 2 && args[0] == execModelGLCompute && !haveEntry:
			entry, haveEntry = args[1], true
		case op == opExecutionMode && len(args) >= 5 && args[1] == modeLocalSize && haveEntry && args[0] == entry:
			copy(size[:], args[2:5])
			haveSize = true
		case op == opExecutionModeID && len(args) >= 5 && args[1] == modeLocalSizeID && haveEntry && args[0] == entry:
			copy(sizeIDs[:], args[2:5])
			haveIDs = true
		case op == opDecorate && len(args) >= 3 && args[1] == decSpecID:
			specIDs[args[0]] = args[2]
		case op == opDecorate && len(args) >= 3 && args[1] == decBuiltIn && args[2] == builtInWorkgroupSize:
			builtIn = args[0]
		case (op == opConstant || op == opSpecConstant) && len(args) >= 3:
			scalars[args[1]] = args[2]
			if id, ok := specIDs[args[1]]; ok && op == opSpecConstant && int(id) < len(spec) {
				scalars[args[1]] = spec[id]
			}
		case (op == opConstantComposite || op == opSpecConstComposite) && len(args) >= 5:
			composite[args[1]] = args[2:5]
		}
		i += n
	}
	if !haveEntry {
		return size, fmt.Errorf("SPIR-V has no GLCompute entry point")
	}
	resolve := func(ids []uint32) ([3]uint32, error) {
		var out [3]uint32
		for k, id := range ids {
			v, ok := scalars[id]
			if !ok {
				return out, fmt.Errorf("SPIR-V workgroup size refers to unknown constant %%%d", id)
			}
			out[k] = v
		}
		return out, nil
	}
	switch {
	case builtIn != 0 && composite[builtIn] != nil:
		return resolve(composite[builtIn])
	case haveIDs:
		return resolve(sizeIDs[:])
	case haveSize:
		return size, nil
	}
	return size, fmt.Errorf("SPIR-V declares no workgroup size")
}
