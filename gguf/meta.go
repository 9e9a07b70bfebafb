package gguf

import (
	"math"
	"slices"
)

// Keys returns the metadata keys present in the file, sorted.
func (f *File) Keys() []string { return slices.Clone(f.keys) }

// Has reports whether the file holds key.
func (f *File) Has(key string) bool { _, ok := f.meta[key]; return ok }

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	s, ok := f.meta[key].(string)
	return s, ok
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	b, ok := f.meta[key].(bool)
	return b, ok
}

// Uint returns an integer value of any integer type that is not negative.
func (f *File) Uint(key string) (uint64, bool) {
	s, u, unsigned, ok := integer(f.meta[key])
	switch {
	case !ok:
		return 0, false
	case unsigned:
		return u, true
	default:
		return uint64(s), s >= 0
	}
}

// Int returns an integer value of any integer type that fits in an int64.
func (f *File) Int(key string) (int64, bool) {
	s, u, unsigned, ok := integer(f.meta[key])
	switch {
	case !ok:
		return 0, false
	case unsigned:
		return int64(u), u <= math.MaxInt64
	default:
		return s, true
	}
}

// Float returns a float32 or float64 value, or an integer converted.
func (f *File) Float(key string) (float64, bool) {
	switch v := f.meta[key].(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	s, u, unsigned, ok := integer(f.meta[key])
	switch {
	case !ok:
		return 0, false
	case unsigned:
		return float64(u), true
	default:
		return float64(s), true
	}
}

// Strings returns a copy of an array of strings.
func (f *File) Strings(key string) ([]string, bool) {
	v, ok := f.meta[key].([]string)
	return slices.Clone(v), ok
}

// Float32s returns a copy of an array of float32.
func (f *File) Float32s(key string) ([]float32, bool) {
	v, ok := f.meta[key].([]float32)
	return slices.Clone(v), ok
}

// Int32s returns an array of int32, or an array of another integer type
// converted when every element fits in an int32.
func (f *File) Int32s(key string) ([]int32, bool) {
	switch v := f.meta[key].(type) {
	case []int32:
		return slices.Clone(v), true
	case []int8:
		return toInt32(v)
	case []int16:
		return toInt32(v)
	case []int64:
		return toInt32(v)
	case []uint8:
		return toInt32(v)
	case []uint16:
		return toInt32(v)
	case []uint32:
		return toInt32(v)
	case []uint64:
		return toInt32(v)
	}
	return nil, false
}

// integer widens any integer scalar: signed types to s, unsigned ones to u
// (with unsigned set).
func integer(v any) (s int64, u uint64, unsigned, ok bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), 0, false, true
	case int16:
		return int64(x), 0, false, true
	case int32:
		return int64(x), 0, false, true
	case int64:
		return x, 0, false, true
	case uint8:
		return 0, uint64(x), true, true
	case uint16:
		return 0, uint64(x), true, true
	case uint32:
		return 0, uint64(x), true, true
	case uint64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

func toInt32[T int8 | int16 | int64 | uint8 | uint16 | uint32 | uint64](xs []T) ([]int32, bool) {
	out := make([]int32, len(xs))
	for i, x := range xs {
		out[i] = int32(x)
		// Converting back loses nothing exactly when x fits; the sign test
		// catches unsigned values that wrap to the same bits.
		if T(out[i]) != x || (out[i] < 0) != (x < 0) {
			return nil, false
		}
	}
	return out, true
}
