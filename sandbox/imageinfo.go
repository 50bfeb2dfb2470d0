package sandbox

// ImageInfo describes an image resolved ahead of a Create.
type ImageInfo struct {
	Ref    string // as asked
	Digest string
	Size   int64 // bytes of its layers, unpacked
	// Cached is true when nothing was pulled, unpacked or built.
	Cached bool
	// Screen is its display's default size (its DisplayLabel); "" when
	// it has none.
	Screen string
}
