package chat

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// What ardanlabs/jinja lacks for chat templates, given to every render as
// globals (a filter name it does not know is looked up among the
// variables, so `x|format(…)` finds these too).

// strftimeNow is strftime_now(format) at the time n, with Python's
// directives. The library has one of its own, but on the wall clock, and it
// rewrites the format with a string replacer that also rewrites literal
// text such as "Jan" or "2006"; Template.Now must govern every date a
// template prints.
func strftimeNow(n time.Time) jinja.Value {
	return jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		f := "%Y-%m-%d"
		if len(args) > 0 {
			if !args[0].IsString() {
				return jinja.Undefined(), fmt.Errorf("strftime_now: the format is %s, not a string", args[0])
			}
			f = args[0].AsString()
		}
		s, err := strftime(n, f)
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	})
}

// strftime formats t with Python's strftime directives (C locale).
func strftime(t time.Time, f string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		if i++; i == len(f) {
			return "", fmt.Errorf("strftime_now: %q ends in a lone %%", f)
		}
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'B':
			b.WriteString(t.Month().String())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'Z':
			b.WriteString(t.Format("MST"))
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime_now: directive %%%c is not supported", f[i])
		}
	}
	return b.String(), nil
}

// format is Jinja's format filter, Python's printf-style % operator:
// "%s of %d"|format(a, b). It knows %s, %d, %i, %f (with a precision) and %%.
func format(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), fmt.Errorf("format: the format is not a string")
	}
	f, vals := args[0].AsString(), args[1:]
	var b strings.Builder
	next := func() (jinja.Value, error) {
		if len(vals) == 0 {
			return jinja.Undefined(), fmt.Errorf("format: %q wants more arguments than %d", f, len(args)-1)
		}
		v := vals[0]
		vals = vals[1:]
		return v, nil
	}
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		j := i + 1
		for j < len(f) && (f[j] == '.' || f[j] >= '0' && f[j] <= '9') {
			j++
		}
		if j == len(f) {
			return jinja.Undefined(), fmt.Errorf("format: %q ends inside a directive", f)
		}
		spec := f[i+1 : j]
		i = j
		if f[j] == '%' {
			b.WriteByte('%')
			continue
		}
		v, err := next()
		if err != nil {
			return jinja.Undefined(), err
		}
		switch f[j] {
		case 's':
			b.WriteString(text(v))
		case 'd', 'i':
			if !v.IsNumber() {
				return jinja.Undefined(), fmt.Errorf("format: %%%c needs a number, not %s", f[j], v)
			}
			n := v
			if v.IsFloat() {
				n = jinja.NewInt(int64(v.AsFloat()))
			}
			fmt.Fprintf(&b, "%"+spec+"d", n.AsInt())
		case 'f':
			if !v.IsNumber() {
				return jinja.Undefined(), fmt.Errorf("format: %%f needs a number, not %s", v)
			}
			x := 0.0
			if v.IsFloat() {
				x = v.AsFloat()
			} else {
				x = float64(v.AsInt())
			}
			if !strings.Contains(spec, ".") {
				spec += ".6" // Python's default precision, as Go's
			}
			fmt.Fprintf(&b, "%"+spec+"f", x)
		default:
			return jinja.Undefined(), fmt.Errorf("format: directive %%%c is not supported", f[j])
		}
	}
	return jinja.NewString(b.String()), nil
}

// text is how Jinja prints a value: strings as they are, Python's
// True/False/None, numbers in their shortest form.
func text(v jinja.Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsBool():
		if v.AsBool() {
			return "True"
		}
		return "False"
	case v.IsNone():
		return "None"
	case v.IsInt():
		return strconv.FormatInt(v.AsInt(), 10)
	case v.IsFloat():
		s := strconv.FormatFloat(v.AsFloat(), 'g', -1, 64)
		if !strings.ContainsAny(s, ".eIN") {
			s += ".0" // Python writes 2.0, not 2
		}
		return s
	}
	return v.String()
}
