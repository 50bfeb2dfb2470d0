package computer

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"testing"

	"golang.org/x/image/draw"
)

// desktopLike is a 1280x800 picture shaped like a screen: flat panels and
// rows of small dark marks like text (what a browser window mostly is).
func desktopLike() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	rng := rand.New(rand.NewPCG(1, 2))
	draw.Draw(img, img.Rect, image.NewUniform(color.RGBA{245, 245, 245, 255}), image.Point{}, draw.Src)
	for range 12 {
		r := image.Rect(rng.IntN(1200), rng.IntN(760), 0, 0)
		r.Max = r.Min.Add(image.Pt(50+rng.IntN(400), 20+rng.IntN(200)))
		c := color.RGBA{uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), 255}
		draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
	}
	for y := 100; y < 760; y += 18 {
		for x := 40; x < 1000; x++ {
			for dy := range 11 {
				if rng.IntN(3) == 0 {
					img.SetRGBA(x, y+dy, color.RGBA{30, 30, 30, 255})
				}
			}
			if rng.IntN(7) == 0 {
				x += 6 // a space between words
			}
		}
	}
	return img
}

func BenchmarkEncode(b *testing.B) {
	img := desktopLike()
	for _, tc := range []struct {
		name  string
		level png.CompressionLevel
	}{{"BestSpeed", png.BestSpeed}, {"Default", png.DefaultCompression}, {"NoCompression", png.NoCompression}} {
		b.Run(tc.name, func(b *testing.B) {
			enc := png.Encoder{CompressionLevel: tc.level, BufferPool: &pngPool{}}
			var n int
			for b.Loop() {
				var buf bytes.Buffer
				if err := enc.Encode(&buf, img); err != nil {
					b.Fatal(err)
				}
				n = buf.Len()
			}
			b.ReportMetric(float64(n)/1024, "KiB")
		})
	}
}

func BenchmarkScale(b *testing.B) {
	img := desktopLike()
	for _, tc := range []struct {
		name string
		s    draw.Interpolator
	}{{"NearestNeighbor", draw.NearestNeighbor}, {"ApproxBiLinear", draw.ApproxBiLinear}, {"BiLinear", draw.BiLinear}, {"CatmullRom", draw.CatmullRom}} {
		b.Run(tc.name, func(b *testing.B) {
			dst := image.NewRGBA(image.Rect(0, 0, 1024, 640))
			for b.Loop() {
				tc.s.Scale(dst, dst.Rect, img, img.Rect, draw.Src, nil)
			}
		})
	}
}
