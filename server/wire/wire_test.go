package wire

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/internal/consttest"
	"github.com/reinsdev/reins/server/wire/wiretest"
	"github.com/reinsdev/reins/store"
)

type protoEnum interface {
	~int32
	Descriptor() protoreflect.EnumDescriptor
}

// checkEnum holds an enum table to every Go constant (read from source)
// and every wire value: each maps to the other and back, and each wire
// name is its prefix and the Go value in capitals.
func checkEnum[G ~string, P protoEnum](t *testing.T, e enum[G, P], goValues []string) {
	t.Run(e.name, func(t *testing.T) {
		var zero P
		desc := zero.Descriptor()
		prefix := strings.TrimSuffix(string(desc.Values().ByNumber(0).Name()), "UNSPECIFIED")
		if prefix == string(desc.Values().ByNumber(0).Name()) {
			t.Fatalf("%s's 0 is %s, want %sUNSPECIFIED", desc.Name(), desc.Values().ByNumber(0).Name(), desc.Name())
		}
		for _, g := range goValues {
			p := e.proto(G(g))
			if p == 0 {
				t.Errorf("Go value %q has no %s value: add one to the .proto and to the table in enums.go", g, desc.Name())
				continue
			}
			if back := e.fromProto(p); back != G(g) {
				t.Errorf("%q → %v → %q", g, p, back)
			}
			if name := string(desc.Values().ByNumber(protoreflect.EnumNumber(p)).Name()); name != prefix+strings.ToUpper(g) {
				t.Errorf("%q is sent as %s, want %s%s", g, name, prefix, strings.ToUpper(g))
			}
		}
		if len(e.toP) != len(goValues) {
			t.Errorf("the table has %d values, the Go package %d (%v)", len(e.toP), len(goValues), goValues)
		}
		vals := desc.Values()
		for i := 0; i < vals.Len(); i++ {
			n := vals.Get(i).Number()
			if n == 0 {
				if g := e.fromProto(P(n)); g != "" {
					t.Errorf("UNSPECIFIED reads as %q", g)
				}
				continue
			}
			g := e.fromProto(P(n))
			if g == "" || e.proto(g) != P(n) {
				t.Errorf("%s reads as %q, which is sent as %v", vals.Get(i).Name(), g, e.proto(g))
			}
		}
	})
}

func TestEnums(t *testing.T) {
	checkEnum(t, runStatuses, consttest.Typed(t, "../../runlog", "Status"))
	checkEnum(t, sandboxStates, consttest.Typed(t, "../../sandbox", "State"))
	checkEnum(t, sandboxReasons, consttest.Typed(t, "../../sandbox", "Reason"))
	checkEnum(t, progressPhases, append(consttest.Prefixed(t, "../../image", "Phase"), consttest.Prefixed(t, "../../sandbox", "Phase")...))
	checkEnum(t, eventTypes, consttest.Prefixed(t, "../../runlog", "Event"))
	checkEnum(t, stopReasons, consttest.Typed(t, "../../model", "StopReason"))
	checkEnum(t, blockTypes, consttest.Typed(t, "../../model", "BlockType"))
	checkEnum(t, policyActions, consttest.Typed(t, "../../policy", "Action"))
	checkEnum(t, networkModes, consttest.Typed(t, "../../egress", "Mode"))
}

// TestUnknownValue: a Go value with no wire form is UNSPECIFIED and
// logged; the empty value is UNSPECIFIED quietly.
func TestUnknownValue(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	if got := RunStatus("hibernating"); got != reinsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		t.Errorf("unknown status: %v", got)
	}
	if !strings.Contains(buf.String(), "hibernating") || !strings.Contains(buf.String(), "RunStatus") {
		t.Errorf("not logged: %q", buf.String())
	}
	buf.Reset()
	if got := SandboxReason(""); got != reinsv1.SandboxReason_SANDBOX_REASON_UNSPECIFIED || buf.Len() != 0 {
		t.Errorf("empty reason: %v, log %q", got, buf.String())
	}
	if got := RunStatusFromProto(reinsv1.RunStatus(99)); got != "" {
		t.Errorf("a wire value this build does not know: %q", got)
	}
	ev := Event(store.Event{RunID: "run_x", Seq: 3, Type: "teleported", Data: json.RawMessage(`{}`)})
	if ev.Type != reinsv1.EventType_EVENT_TYPE_UNSPECIFIED || ev.Payload != nil || ev.Seq != 3 || !strings.Contains(buf.String(), "teleported") {
		t.Errorf("unknown event type: %v, log %q", ev, buf.String())
	}
	ev = Event(store.Event{RunID: "run_x", Seq: 4, Type: "tool_call", Data: json.RawMessage(`{"step":"two"}`)})
	if ev.Type != reinsv1.EventType_EVENT_TYPE_TOOL_CALL || ev.Payload != nil || !strings.Contains(buf.String(), "does not decode") {
		t.Errorf("bad payload: %v, log %q", ev, buf.String())
	}
}

// TestEventsRoundTrip: every event type's payload, every field set, goes
// Go → JSON (the log) → the wire (binary and JSON) → Go unchanged.
func TestEventsRoundTrip(t *testing.T) {
	samples := wiretest.Samples()
	types := consttest.Prefixed(t, "../../runlog", "Event")
	if len(samples) != len(types) {
		t.Errorf("wiretest has %d samples for %d event types", len(samples), len(types))
	}
	at := time.Unix(1700000000, 42)
	for _, typ := range types {
		want, ok := samples[typ]
		if !ok {
			t.Errorf("event type %q has no sample in wiretest", typ)
			continue
		}
		allSet(t, typ, reflect.ValueOf(want))
		data, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		pb := Event(store.Event{RunID: "run_x", Seq: 9, Type: typ, Time: at, Data: data})
		if pb.Type == 0 || pb.Payload == nil || pb.RunId != "run_x" || pb.Seq != 9 || pb.TimeUnixNano != at.UnixNano() {
			t.Errorf("%s: %v", typ, pb)
			continue
		}
		for name, codec := range map[string]struct {
			marshal   func(proto.Message) ([]byte, error)
			unmarshal func([]byte, proto.Message) error
		}{"binary": {proto.Marshal, proto.Unmarshal}, "json": {protojson.Marshal, protojson.Unmarshal}} {
			b, err := codec.marshal(pb)
			if err != nil {
				t.Fatal(err)
			}
			var got reinsv1.RunEvent
			if err := codec.unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if EventTypeFromProto(got.Type) != typ {
				t.Errorf("%s over %s: type %v", typ, name, got.Type)
			}
			if d := cmp.Diff(want, EventPayload(&got), rulesCmp...); d != "" {
				t.Errorf("%s over %s (-sent +received):\n%s", typ, name, d)
			}
		}
	}
}

// allSet fails if a sample leaves a field zero: a field the conversion
// dropped would then go unnoticed.
func allSet(t *testing.T, typ string, v reflect.Value) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.IsZero() {
			t.Errorf("the %s sample leaves %s zero", typ, v.Type().Field(i).Name)
		}
		if f.Kind() == reflect.Struct && f.Type() != reflect.TypeFor[time.Time]() {
			allSet(t, typ, f)
		}
	}
}
