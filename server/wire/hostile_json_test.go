package wire

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// depthOf is how deeply md's messages nest (1: no message field), or -1
// when a message contains itself.
func depthOf(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) int {
	if seen[md.FullName()] {
		return -1
	}
	seen[md.FullName()] = true
	defer delete(seen, md.FullName())
	most := 1
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Message() == nil {
			continue
		}
		d := depthOf(fd.Message(), seen)
		if d < 0 {
			return -1
		}
		most = max(most, d+1)
	}
	return most
}

// TestHostileJSONDeepNesting: a body nested beyond MaxJSONDepth is
// refused, whether the nesting is in a field the message ignores or in
// its own fields (a Block holds Blocks), quickly and without a crash;
// every message of the API but those nests less than the limit, so none
// is refused for its shape.
func TestHostileJSONDeepNesting(t *testing.T) {
	recursive := 0
	eachMessage(Files, func(md protoreflect.MessageDescriptor) {
		switch d := depthOf(md, map[protoreflect.FullName]bool{}); {
		case d < 0:
			recursive++
		case d >= MaxJSONDepth/2:
			t.Errorf("%s nests %d deep, the JSON reader takes %d", md.FullName(), d, MaxJSONDepth)
		}
	})
	if recursive == 0 {
		t.Error("no message holds itself: the Block case below tests nothing")
	}
	blocks := func(n int) string {
		return `{"new":[` + strings.Repeat(`{"text":"x","content":[`, n) + strings.Repeat(`]}`, n) + `]}`
	}
	var call reinsv1.GatewayCall
	if err := (JSONCodec{}).Unmarshal([]byte(blocks(20)), &call); err != nil {
		t.Errorf("blocks 20 deep: %v", err)
	}
	depth := 0
	for b := call.New; len(b) > 0; b = b[0].Content {
		depth++
	}
	if depth != 20 {
		t.Errorf("blocks 20 deep read %d deep", depth)
	}
	if err := (JSONCodec{}).Unmarshal([]byte(blocks(MaxJSONDepth)), &call); err == nil {
		t.Errorf("blocks %d deep are read", MaxJSONDepth)
	}
	for name, body := range map[string]string{
		"an ignored field, objects": `{"x":` + strings.Repeat(`{"x":`, 100) + `1` + strings.Repeat(`}`, 101),
		"an ignored field, arrays":  `{"x":` + strings.Repeat(`[`, 100) + strings.Repeat(`]`, 100) + `}`,
		"a million arrays":          `{"x":` + strings.Repeat(`[`, 1<<20) + strings.Repeat(`]`, 1<<20) + `}`,
		"unclosed":                  `{"x":` + strings.Repeat(`[`, 1<<20),
	} {
		start := time.Now()
		err := (JSONCodec{}).Unmarshal([]byte(body), &reinsv1.CreateSandboxRequest{})
		if err == nil {
			t.Errorf("%s: a body nested beyond %d deep is read", name, MaxJSONDepth)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: took %v to refuse", name, d)
		}
	}
	// Nesting the API allows still reads.
	ok := `{"x":` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `,"spec":{"image":"busybox"}}`
	var req reinsv1.CreateSandboxRequest
	if err := (JSONCodec{}).Unmarshal([]byte(ok), &req); err != nil || req.Spec.GetImage() != "busybox" {
		t.Errorf("a body 41 deep: %v %v", err, &req)
	}
}

// TestHostileJSONNumbers: numbers an int64 (or its field) cannot hold,
// and strings that are no number, are refused naming the field, never
// wrapped, truncated or a crash; with Opaque the value is not quoted.
func TestHostileJSONNumbers(t *testing.T) {
	for _, body := range []string{
		`{"seq":1e400}`, `{"seq":9223372036854775808}`, `{"seq":-9223372036854775809}`,
		`{"seq":"99999999999999999999999999999999999999"}`, `{"seq":"NaN"}`, `{"seq":"Infinity"}`,
		`{"seq":1.5}`, `{"seq":"0x10"}`, `{"seq":""}`, `{"seq":" 1"}`, `{"seq":true}`, `{"seq":[1]}`,
		`{"seq":` + strings.Repeat("9", 100000) + `}`, `{"port":4294967296}`, `{"port":-2147483649}`,
		`{"bytes_in":NaN}`, `{"seq":-}`,
	} {
		var m reinsv1.EgressLogEntry
		err := (JSONCodec{}).Unmarshal([]byte(body), &m)
		if err == nil {
			t.Errorf("%.60s: read as %v", body, &m)
			continue
		}
		if !strings.Contains(err.Error(), "check each field's type") {
			t.Errorf("%.60s: %v, want the hint", body, err)
		}
		err = (JSONCodec{Opaque: true}).Unmarshal([]byte(body), &m)
		if err == nil || strings.Contains(err.Error(), "999") || strings.Contains(err.Error(), "NaN") || strings.Contains(err.Error(), "0x10") {
			t.Errorf("%.60s, opaque: %v", body, err)
		}
	}
	var spec reinsv1.SandboxSpec
	if err := (JSONCodec{}).Unmarshal([]byte(`{"cpus":1e400}`), &spec); err == nil {
		t.Errorf("a double beyond float64: %v", spec.Cpus)
	}
	for _, body := range []string{`{"peak_memory_bytes":-1}`, `{"peak_memory_bytes":18446744073709551616}`} {
		var sb reinsv1.Sandbox
		if err := (JSONCodec{}).Unmarshal([]byte(body), &sb); err == nil {
			t.Errorf("%s: a uint64 read as %d", body, sb.PeakMemoryBytes)
		}
	}
	// The limits themselves, as numbers and as strings, read exactly.
	for body, want := range map[string]int64{
		`{"seq":9223372036854775807}`: 1<<63 - 1, `{"seq":"-9223372036854775808"}`: -1 << 63,
		`{"seq":9007199254740993}`: 1<<53 + 1, `{"seq":"9007199254740993"}`: 1<<53 + 1, `{"seq":1e3}`: 1000,
	} {
		var m reinsv1.EgressLogEntry
		if err := (JSONCodec{}).Unmarshal([]byte(body), &m); err != nil || m.Seq != want {
			t.Errorf("%s: %v %d, want %d", body, err, m.Seq, want)
		}
	}
}

// TestHostileJSONTimes: the X_time fields are the service's output only:
// a caller's, of any type, changes nothing.
func TestHostileJSONTimes(t *testing.T) {
	var m reinsv1.EgressLogEntry
	body := `{"seq":3,"time_unix_nano":5,"time":"2001-01-01T00:00:00Z","created_time":{"a":[1]},"at_time":1e400}`
	if err := (JSONCodec{}).Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&m, &reinsv1.EgressLogEntry{Seq: 3, TimeUnixNano: 5}) {
		t.Errorf("read %v", &m)
	}
}

// A request the reader refuses is told of its fields by the names of the
// JSON shape (snake_case), which are what it sent, not protojson's
// camelCase ones; a value that is no field's name is left as it was.
func TestDecodeErrorsNameFieldsAsTheShape(t *testing.T) {
	for body, want := range map[string]string{
		`{"spec":{"memory_bytes":"x"}}`:            "field memory_bytes",
		`{"spec":{"network":{"allow_hosts":[1]}}}`: "field allow_hosts",
		`{"spec":{"idle_timeout_ms":"soon"}}`:      "field idle_timeout_ms",
		`{"spec":{"ttl_ms":true}}`:                 "field ttl_ms",
	} {
		err := (JSONCodec{}).Unmarshal([]byte(body), &reinsv1.CreateSandboxRequest{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to name %q", body, err, want)
		}
	}
}
