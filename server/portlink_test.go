package server

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func testPorts() *Ports {
	return &Ports{Domain: "localhost", ServicePort: "7070", Key: []byte("0123456789abcdef0123456789abcdef")}
}

func TestParsePortHost(t *testing.T) {
	p := testPorts()
	for host, want := range map[string]struct {
		id        string
		port      int
		under, ok bool
	}{
		"3000-a0b1c2d3e4f5.localhost:7070":               {"a0b1c2d3e4f5", 3000, true, true},
		"3000-A0B1C2D3E4F5.LOCALHOST":                    {"a0b1c2d3e4f5", 3000, true, true},
		"65535-abc.localhost.":                           {"abc", 65535, true, true},
		"1-abc.localhost":                                {"abc", 1, true, true},
		"3000-abc.localhost.evil.com":                    {},
		"3000-abc.evil.com":                              {},
		"localhost:7070":                                 {},
		"127.0.0.1:7070":                                 {},
		"evillocalhost":                                  {},
		"3000-abc.evillocalhost":                         {},
		"0-abc.localhost":                                {under: true},
		"70000-abc.localhost":                            {under: true},
		"65536-abc.localhost":                            {under: true},
		"03000-abc.localhost":                            {under: true},
		"+3000-abc.localhost":                            {under: true},
		"3000-../x.localhost":                            {under: true},
		"3000-a.b.localhost":                             {under: true},
		"3000-.localhost":                                {under: true},
		"3000.localhost":                                 {under: true},
		"3000-abc-def.localhost":                         {under: true},
		"x-abc.localhost":                                {under: true},
		"3000-" + strings.Repeat("a", 64) + ".localhost": {under: true},
	} {
		id, port, under, ok := p.parseHost(host)
		if id != want.id || port != want.port || under != want.under || ok != want.ok {
			t.Errorf("parseHost(%q) = %q %d under=%v ok=%v, want %+v", host, id, port, under, ok, want)
		}
	}
}

func TestPortLinks(t *testing.T) {
	p := testPorts()
	now := time.Now()
	exp := now.Add(time.Hour).Truncate(time.Second)
	u := p.URL("abc", 3000, exp)
	prefix := "http://3000-abc.localhost:7070/?" + linkParam + "="
	if !strings.HasPrefix(u, prefix) {
		t.Fatalf("URL %q, want %s…", u, prefix)
	}
	link := strings.TrimPrefix(u, prefix)
	if got, ok := p.verify(link, "abc", 3000, now); !ok || !got.Equal(exp) {
		t.Fatalf("a fresh link: %v %v, want good until %v", got, ok, exp)
	}
	if _, ok := p.verify(link, "abc", 3000, exp.Add(time.Second)); ok {
		t.Error("an expired link is accepted")
	}
	if _, ok := p.verify(link, "abd", 3000, now); ok {
		t.Error("a link is accepted for another sandbox")
	}
	if _, ok := p.verify(link, "abc", 3001, now); ok {
		t.Error("a link is accepted for another port")
	}
	// A later expiry with the old signature: refused.
	_, sig, _ := strings.Cut(link, ".")
	if _, ok := p.verify("9999999999."+sig, "abc", 3000, now); ok {
		t.Error("a link with its expiry moved is accepted")
	}
	other := testPorts()
	other.Key = []byte("another key, another service....")
	if _, ok := other.verify(link, "abc", 3000, now); ok {
		t.Error("a link is accepted under another key")
	}
	for _, bad := range []string{"", ".", "x.y", link + "x", "123", strings.Repeat("9", 30) + "." + sig} {
		if _, ok := p.verify(bad, "abc", 3000, now); ok {
			t.Errorf("link %q accepted", bad)
		}
	}
	if u := p.URL("abc", 3000, time.Time{}); u != "http://3000-abc.localhost:7070/" {
		t.Errorf("a URL needing a token: %q", u)
	}
}

func TestCheckPortRequest(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		port   int32
		public bool
		ttl    time.Duration
		ok     bool
		want   time.Duration
	}{
		{3000, false, 0, true, 0},
		{3000, true, 0, true, DefaultLinkTTL},
		{3000, true, time.Minute, true, time.Minute},
		{3000, true, MaxLinkTTL + time.Second, false, 0},
		{3000, true, -time.Second, false, 0},
		{3000, false, time.Minute, false, 0},
		{0, false, 0, false, 0},
		{65536, false, 0, false, 0},
		{-1, false, 0, false, 0},
	} {
		exp, err := checkPortRequest(c.port, c.public, c.ttl, now)
		if (err == nil) != c.ok {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		if c.ok && c.want != 0 && exp.Sub(now) > c.want || c.ok && c.want != 0 && exp.Sub(now) < c.want-time.Second {
			t.Errorf("%+v: expires in %s", c, exp.Sub(now))
		}
		if c.ok && c.want == 0 && !exp.IsZero() {
			t.Errorf("%+v: a token URL expires", c)
		}
	}
}

func TestStripReinsCookies(t *testing.T) {
	h := http.Header{}
	h.Add("Cookie", "a=1; reins_token=reins_secret; b=2")
	h.Add("Cookie", "reins_link=123.sig")
	stripReinsCookies(h)
	if got := h.Values("Cookie"); len(got) != 1 || got[0] != "a=1; b=2" {
		t.Errorf("cookies left: %q", got)
	}
	h = http.Header{"Cookie": {"reins_token=x"}}
	stripReinsCookies(h)
	if _, ok := h["Cookie"]; ok {
		t.Errorf("cookies left: %q", h["Cookie"])
	}
	resp := &http.Response{Header: http.Header{"Set-Cookie": {"reins_link=forged; Path=/", "app=1"}}}
	dropReinsCookies(resp)
	if got := resp.Header.Values("Set-Cookie"); len(got) != 1 || got[0] != "app=1" {
		t.Errorf("Set-Cookie left: %q", got)
	}
}
