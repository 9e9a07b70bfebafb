package vk

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vkinfer/vkinfer/internal/radvnull"
)

const (
	gfxCompute  = queueGraphics | queueCompute | queueTransfer | queueSparse
	computeOnly = queueCompute | queueTransfer | queueSparse
	transfer    = queueTransfer | queueSparse
	videoDecode = 0x20
)

func TestChooseQueueFamily(t *testing.T) {
	const nvidia, intel, mesa = 0x10de, 0x8086, 0x10005
	fam := func(flags, count uint32) QueueFamily {
		return QueueFamily{Flags: flags, Count: count, TimestampBits: 64}
	}
	for _, c := range []struct {
		name   string
		vendor uint32
		fams   []QueueFamily
		want   int
		why    string
	}{
		// RADV, AMDVLK and AMD's Windows driver: graphics+compute first, then
		// a compute-only family (and transfer, video, sparse-only ones).
		{"AMD", vendorAMD, []QueueFamily{fam(gfxCompute, 1), fam(computeOnly, 4), fam(videoDecode, 1), fam(queueSparse, 1)}, 0, "AMD: graphics+compute"},
		// The policy does not depend on the order a driver lists them in.
		{"AMD, compute-only listed first", vendorAMD, []QueueFamily{fam(computeOnly, 4), fam(transfer, 2), fam(gfxCompute, 1)}, 2, "AMD: graphics+compute"},
		// A compute-only accelerator: the compute-only family is all it has.
		{"AMD without graphics", vendorAMD, []QueueFamily{fam(transfer, 2), fam(computeOnly, 4)}, 1, "AMD: a compute-only family"},
		// A family without queues cannot be used.
		{"AMD, empty graphics family", vendorAMD, []QueueFamily{fam(gfxCompute, 0), fam(computeOnly, 4)}, 1, "AMD: a compute-only family"},
		{"NVIDIA", nvidia, []QueueFamily{fam(gfxCompute, 16), fam(transfer, 2), fam(computeOnly, 8), fam(videoDecode, 1)}, 0, "first family with compute"},
		{"Intel", intel, []QueueFamily{fam(queueGraphics|queueCompute|queueTransfer, 1)}, 0, "first family with compute"},
		{"lavapipe", mesa, []QueueFamily{fam(queueGraphics|queueCompute|queueTransfer, 1)}, 0, "first family with compute"},
		// Elsewhere the driver's order decides, even for a compute-only family.
		{"other vendor, compute-only first", nvidia, []QueueFamily{fam(computeOnly, 2), fam(gfxCompute, 1)}, 0, "first family with compute"},
		{"no compute", vendorAMD, []QueueFamily{fam(queueGraphics, 1), fam(transfer, 1)}, -1, "no queue family runs compute"},
		{"no families", nvidia, nil, -1, "no queue family runs compute"},
	} {
		got, why := chooseQueueFamily(c.vendor, c.fams)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: family %d (%q), want %d (%q)", c.name, got, why, c.want, c.why)
		}
	}
}

func TestQueueFamilyString(t *testing.T) {
	for f, want := range map[QueueFamily]string{
		{Flags: gfxCompute}:  "graphics compute transfer sparse",
		{Flags: computeOnly}: "compute transfer sparse",
		{Flags: videoDecode}: "no graphics or compute",
	} {
		if got := f.String(); got != want {
			t.Errorf("%#x: %q, want %q", f.Flags, got, want)
		}
	}
}

// nullDeviceReport is what the child process of TestNullDevices reports.
type nullDeviceReport struct {
	Devices     []DeviceInfo
	BufferError string
	SeqError    string
}

const nullChildEnv = "VKINFER_NULL_DEVICE_CHILD"

// TestNullDevices runs on RADV's null devices (radvnull.Families), each in a
// child process, since RADV_FORCE_FAMILY must be set before the loader
// starts. Every one must be listed, open, refuse work with the reason and
// close without a crash, and its real queue families must give the AMD
// policy's choice: the graphics+compute family.
func TestNullDevices(t *testing.T) {
	if os.Getenv(nullChildEnv) == "1" {
		nullDeviceChild(t)
		return
	}
	for _, family := range radvnull.Families {
		t.Run(family, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNullDevices$", "-test.count=1")
			cmd.Env = append(radvnull.Env(t, family), nullChildEnv+"=1", "XDG_CACHE_HOME="+t.TempDir())
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("child: %v\n%s%s", err, out.String(), errb.String())
			}
			_, js, ok := strings.Cut(out.String(), "REPORT ")
			var r nullDeviceReport
			if !ok || json.Unmarshal([]byte(strings.SplitN(js, "\n", 2)[0]), &r) != nil {
				t.Fatalf("child printed no report:\n%s%s", out.String(), errb.String())
			}
			if len(r.Devices) != 1 {
				t.Fatalf("%d devices, want the null device alone", len(r.Devices))
			}
			d := r.Devices[0]
			t.Logf("\n%s", d.ReportVerbose())
			if want := "Null hardware (RADV " + strings.ToUpper(family) + ")"; d.Name != want {
				t.Errorf("name %q, want %q", d.Name, want)
			}
			if d.Unusable != "" || d.CannotRun != "reports no memory heaps" {
				t.Errorf("unusable %q, cannot run %q; want usable for compiling, unable to run work", d.Unusable, d.CannotRun)
			}
			for _, e := range []string{r.BufferError, r.SeqError} {
				if !strings.Contains(e, "cannot run work") {
					t.Errorf("work on the null device: %q, want a 'cannot run work' error", e)
				}
			}
			q, why := chooseQueueFamily(d.VendorID, d.QueueFamilies)
			if d.VendorID != vendorAMD || q != d.Queue || why != d.QueueReason || q < 0 || !d.QueueFamilies[q].graphicsCompute() {
				t.Errorf("vendor %#x, families %v: queue %d (%q), policy %d (%q); want the graphics+compute family",
					d.VendorID, d.QueueFamilies, d.Queue, d.QueueReason, q, why)
			}
		})
	}
}

// nullDeviceChild lists the devices, opens the first, tries to give it work
// and closes it, printing a report for the parent.
func nullDeviceChild(t *testing.T) {
	devs, err := Devices()
	must(t, err)
	r := nullDeviceReport{Devices: devs}
	d, err := Open(Options{Device: 0})
	must(t, err)
	if _, err := d.NewBuffer(16, false); err != nil {
		r.BufferError = err.Error()
	}
	if err := d.NewSequence().End(); err != nil {
		r.SeqError = err.Error()
	}
	d.Close()
	js, err := json.Marshal(r)
	must(t, err)
	os.Stdout.WriteString("REPORT " + string(js) + "\n")
}
