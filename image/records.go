package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
)

// recordVersion is written in every record; a reader that finds another
// version treats the record as absent and the work is done again.
const recordVersion = 1

// refRecord maps a reference to an image.
type refRecord struct {
	Version  int       `json:"version"`
	Ref      string    `json:"ref"`
	Digest   string    `json:"digest"`
	Source   string    `json:"source,omitempty"` // what a built-in was built from
	Resolved time.Time `json:"resolved"`
}

// imageRecord describes an image whose layers are unpacked.
type imageRecord struct {
	Version int      `json:"version"`
	Digest  string   `json:"digest"`
	Config  Config   `json:"config"`
	Layers  []string `json:"layers"` // diff IDs, lowest first
	Size    int64    `json:"size"`
}

// layerRecord sits beside an unpacked layer's directory.
type layerRecord struct {
	Version int    `json:"version"`
	DiffID  string `json:"diffID"`
	Size    int64  `json:"size"` // bytes of the uncompressed tar
}

func (s *Store) refPath(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.dir, "refs", hex.EncodeToString(sum[:])+".json")
}

// digestPath maps "sha256:HEX" under base, refusing anything else so that
// a digest never becomes a path outside the store.
func digestPath(base, digest, suffix string) (string, error) {
	hexPart, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexPart) != 64 || strings.Trim(hexPart, "0123456789abcdef") != "" {
		return "", fmt.Errorf("digest %q: only sha256 digests are supported: %w", digest, errdefs.ErrInvalidArgument)
	}
	return filepath.Join(base, "sha256", hexPart+suffix), nil
}

func (s *Store) imagePath(digest string) string {
	p, err := digestPath(filepath.Join(s.dir, "images"), digest, ".json")
	if err != nil {
		return filepath.Join(s.dir, "images", "invalid")
	}
	return p
}

// layerDir is where the layer with this diff ID is unpacked.
func (s *Store) layerDir(diffID string) (string, error) {
	return digestPath(filepath.Join(s.dir, "layers"), diffID, "")
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON replaces path atomically.
func (s *Store) writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (s *Store) readRef(key string) (*refRecord, error) {
	var r refRecord
	if err := readJSON(s.refPath(key), &r); err != nil {
		return nil, err
	}
	if r.Version != recordVersion || r.Ref != key {
		return nil, fs.ErrNotExist
	}
	return &r, nil
}

func (s *Store) readRefs() ([]refRecord, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "refs"))
	if err != nil {
		return nil, err
	}
	var out []refRecord
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		var r refRecord
		if err := readJSON(filepath.Join(s.dir, "refs", e.Name()), &r); err != nil || r.Version != recordVersion {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Store) readImage(digest string) (*imageRecord, error) {
	var r imageRecord
	if err := readJSON(s.imagePath(digest), &r); err != nil {
		return nil, err
	}
	if r.Version != recordVersion || r.Digest != digest {
		return nil, fs.ErrNotExist
	}
	return &r, nil
}

// readLayerSize returns the recorded size of an unpacked layer, 0 if unknown.
func (s *Store) readLayerSize(diffID string) int64 {
	dir, err := s.layerDir(diffID)
	if err != nil {
		return 0
	}
	var r layerRecord
	if readJSON(dir+".json", &r) != nil {
		return 0
	}
	return r.Size
}

// imageFromRecord returns the Image a record describes if all its layers
// are unpacked.
func (s *Store) imageFromRecord(ref string, ir *imageRecord) (*Image, bool) {
	img := &Image{Ref: ref, Digest: ir.Digest, Config: ir.Config, Size: ir.Size}
	for _, d := range ir.Layers {
		dir, err := s.layerDir(d)
		if err != nil {
			return nil, false
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, false
		}
		img.Layers = append(img.Layers, dir)
	}
	return img, true
}

// cached returns the image key names if the store has all of it and, for
// built-ins, it was built from source.
func (s *Store) cached(key, source string) (*Image, bool) {
	rr, err := s.readRef(key)
	if err != nil || rr.Source != source {
		return nil, false
	}
	ir, err := s.readImage(rr.Digest)
	if err != nil {
		return nil, false
	}
	img, ok := s.imageFromRecord(key, ir)
	if ok {
		img.Cached = true
	}
	return img, ok
}

// record writes the image and the reference to it.
func (s *Store) record(key, source string, ir *imageRecord) error {
	ir.Version = recordVersion
	if err := s.writeJSON(s.imagePath(ir.Digest), ir); err != nil {
		return err
	}
	return s.writeJSON(s.refPath(key), &refRecord{
		Version: recordVersion, Ref: key, Digest: ir.Digest, Source: source,
		Resolved: time.Now().UTC(),
	})
}
