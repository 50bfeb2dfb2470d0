package server

import (
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/image"
)

// errHostImage is the one answer to a tenant naming an image by a path on
// the service's host: the same whatever is at the path (a layout, a file,
// a directory, nothing), so it tells nothing of the host.
var errHostImage = errdefs.WithMessage(errdefs.ErrPermissionDenied,
	"images from a path on the service's host (oci:, docker-archive:) are the operator's: "+
		"use a registry image (e.g. debian or docker.io/library/alpine:3), or ask the operator to load it")

// CheckImage refuses an image that tenant may not name: tenants ("" is the
// admin) name no host path. It reads nothing.
func CheckImage(tenant, ref string) error {
	if tenant != "" && image.NamesHostPath(ref) {
		return errHostImage
	}
	return nil
}
