package computer

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"math"
	"sync"

	"github.com/jezek/xgb/xproto"
	"golang.org/x/image/draw"
)

// Limits of a screenshot. One over them is scaled down, with a note saying
// so, never refused: MaxPixels applies when the caller asks no scale (the
// size models see best, and that Anthropic's API itself shrinks images
// to), MaxPNG always (the largest image the model APIs take).
const (
	MaxPixels = 1_150_000
	MaxPNG    = 5 << 20
)

// maxPNG is MaxPNG but for tests.
var maxPNG = MaxPNG

// Scaler is the filter screenshots are scaled with (measured in
// BenchmarkScale: ApproxBiLinear is several times faster than CatmullRom
// and keeps text legible when shrinking by less than half).
var Scaler draw.Interpolator = draw.ApproxBiLinear

// encoder is the PNG encoder: BestSpeed (measured in BenchmarkEncode: a
// fraction of the default level's time, for files a little larger).
var encoder = png.Encoder{CompressionLevel: png.BestSpeed, BufferPool: &pngPool{}}

type pngPool struct{ p sync.Pool }

func (p *pngPool) Get() *png.EncoderBuffer {
	b, _ := p.p.Get().(*png.EncoderBuffer)
	return b
}
func (p *pngPool) Put(b *png.EncoderBuffer) { p.p.Put(b) }

// checkPixmapFormat makes sure the root window's pixels are what capture
// converts: 24-bit true colour in 32 bits a pixel, least significant byte
// first (what Xvfb gives on every little-endian machine).
func checkPixmapFormat(setup *xproto.SetupInfo, screen *xproto.ScreenInfo) error {
	bpp := 0
	for _, f := range setup.PixmapFormats {
		if f.Depth == screen.RootDepth {
			bpp = int(f.BitsPerPixel)
		}
	}
	var red, green, blue uint32
	for _, d := range screen.AllowedDepths {
		for _, v := range d.Visuals {
			if v.VisualId == screen.RootVisual {
				red, green, blue = v.RedMask, v.GreenMask, v.BlueMask
			}
		}
	}
	if screen.RootDepth != 24 || bpp != 32 || setup.ImageByteOrder != xproto.ImageOrderLSBFirst ||
		red != 0xff0000 || green != 0xff00 || blue != 0xff {
		return fmt.Errorf("the X server's pixel format is not supported (depth %d, %d bits a pixel, byte order %d): start it with -screen 0 WxHx24",
			screen.RootDepth, bpp, setup.ImageByteOrder)
	}
	return nil
}

// capture reads the rectangle r of the root window (screen pixels).
func (x *xserver) capture(r image.Rectangle) (*image.RGBA, error) {
	reply, err := xproto.GetImage(x.conn, xproto.ImageFormatZPixmap, xproto.Drawable(x.root),
		int16(r.Min.X), int16(r.Min.Y), uint16(r.Dx()), uint16(r.Dy()), 0xffffffff).Reply()
	if err != nil {
		return nil, fmt.Errorf("reading the screen: %w", err)
	}
	n := r.Dx() * r.Dy() * 4
	if len(reply.Data) < n {
		return nil, fmt.Errorf("reading the screen: the X server sent %d bytes for %dx%d pixels", len(reply.Data), r.Dx(), r.Dy())
	}
	// BGRX to RGBA, in place: the reply's buffer is ours.
	px := reply.Data[:n]
	for i := 0; i < n; i += 4 {
		px[i], px[i+2], px[i+3] = px[i+2], px[i], 0xff
	}
	return &image.RGBA{Pix: px, Stride: r.Dx() * 4, Rect: image.Rect(0, 0, r.Dx(), r.Dy())}, nil
}

// shot is an encoded screenshot.
type shot struct {
	png           []byte
	width, height int
	note          string
}

// encode scales img to w×h (if it is not that size already) and encodes
// it, shrinking it further while the PNG is over MaxPNG.
func encode(img *image.RGBA, w, h int) (shot, error) {
	var out shot
	w0, h0 := w, h
	for range 4 {
		scaled := img
		if w != img.Rect.Dx() || h != img.Rect.Dy() {
			scaled = image.NewRGBA(image.Rect(0, 0, w, h))
			Scaler.Scale(scaled, scaled.Rect, img, img.Rect, draw.Src, nil)
		}
		var buf bytes.Buffer
		buf.Grow(w * h / 2)
		if err := encoder.Encode(&buf, scaled); err != nil {
			return out, fmt.Errorf("encoding the screenshot: %w", err)
		}
		out.png, out.width, out.height = buf.Bytes(), w, h
		if buf.Len() <= maxPNG {
			return out, nil
		}
		// PNG size goes roughly with the pixel count.
		f := math.Sqrt(float64(maxPNG)/float64(buf.Len())) * 0.9
		nw, nh := max(1, int(float64(w)*f)), max(1, int(float64(h)*f))
		out.note = fmt.Sprintf("the screenshot was scaled from %dx%d to %dx%d to fit the limit of %s a PNG", w0, h0, nw, nh, size(maxPNG))
		w, h = nw, nh
	}
	return out, nil
}

// fitPixels returns w×h shrunk, keeping its shape, to at most MaxPixels.
func fitPixels(w, h int) (int, int) {
	if w*h <= MaxPixels {
		return w, h
	}
	f := math.Sqrt(float64(MaxPixels) / float64(w*h))
	return max(1, int(float64(w)*f)), max(1, int(float64(h)*f))
}

// fitInside returns the largest size of w×h's shape that fits in bw×bh.
func fitInside(w, h, bw, bh int) (int, int) {
	if w*bh > h*bw { // wider than the box
		return bw, max(1, h*bw/w)
	}
	return max(1, w*bh/h), bh
}

// size says a byte count in words: "5 MiB", "200 KiB".
func size(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
