// ocicheck reads an image archive the way image tools do and fails on anything they would refuse:
// as Docker's archive (manifest.json, what `docker load` reads) and as an OCI image layout
// (index.json, what containerd's `ctr image import` and `kind load image-archive` read), checking
// every digest, size and diff ID with go-containerregistry's validators. Prints the manifest
// digest and the image reference it found.
package main

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

func main() {
	if len(os.Args) != 3 {
		fail("usage: ocicheck ARCHIVE REFERENCE (as containerd names it: REGISTRY/PATH:TAG)")
	}
	archive, reference := os.Args[1], os.Args[2]

	tag, err := name.NewTag(reference)
	check("reference", err)
	docker, err := tarball.ImageFromPath(archive, &tag)
	check("docker archive", err)
	check("docker archive", validate.Image(docker))
	// The docker reader writes a manifest of its own, so the two agree on the config (which
	// names every layer's diff ID), not on the manifest digest.
	dockerConfig, err := docker.ConfigName()
	check("docker archive config", err)

	dir, err := os.MkdirTemp("", "ocicheck")
	check("temp dir", err)
	defer os.RemoveAll(dir)
	check("unpack", unpack(archive, dir))
	index, err := layout.ImageIndexFromPath(dir)
	check("oci layout", err)
	check("oci layout", validate.Index(index))
	manifest, err := index.IndexManifest()
	check("oci index", err)
	if len(manifest.Manifests) != 1 {
		fail(fmt.Sprintf("oci index: %d manifests, want 1", len(manifest.Manifests)))
	}
	desc := manifest.Manifests[0]
	// containerd imports the image under this name, exactly as written.
	if desc.Annotations["io.containerd.image.name"] != reference {
		fail(fmt.Sprintf("oci index: image name %q, want %q", desc.Annotations["io.containerd.image.name"], reference))
	}
	if desc.Annotations["org.opencontainers.image.ref.name"] != tag.TagStr() {
		fail(fmt.Sprintf("oci index: ref name %q, want %q", desc.Annotations["org.opencontainers.image.ref.name"], tag.TagStr()))
	}
	// One image, or (a multi-platform image) an index of one image per platform, the docker
	// archive's among them.
	var configs []string
	if desc.MediaType.IsIndex() {
		inner, err := index.ImageIndex(desc.Digest)
		check("oci inner index", err)
		check("oci inner index", validate.Index(inner))
		platforms, err := inner.IndexManifest()
		check("oci inner index", err)
		seen := map[string]bool{}
		for _, m := range platforms.Manifests {
			if m.Platform == nil || m.Platform.OS != "linux" || m.Platform.Architecture == "" {
				fail(fmt.Sprintf("oci inner index: manifest %s names no linux platform", m.Digest))
			}
			if seen[m.Platform.Architecture] {
				fail("oci inner index: two manifests for " + m.Platform.Architecture)
			}
			seen[m.Platform.Architecture] = true
			image, err := inner.Image(m.Digest)
			check("oci image "+m.Platform.Architecture, err)
			config, err := image.ConfigFile()
			check("oci image config "+m.Platform.Architecture, err)
			if config.Architecture != m.Platform.Architecture {
				fail(fmt.Sprintf("the %s manifest's config says %s", m.Platform.Architecture, config.Architecture))
			}
			name, err := image.ConfigName()
			check("oci image config", err)
			configs = append(configs, name.String())
		}
		if len(configs) < 2 {
			fail(fmt.Sprintf("oci inner index: %d platforms, want several", len(configs)))
		}
	} else {
		image, err := index.Image(desc.Digest)
		check("oci image", err)
		name, err := image.ConfigName()
		check("oci image config", err)
		configs = append(configs, name.String())
	}
	found := false
	for _, c := range configs {
		found = found || c == dockerConfig.String()
	}
	if !found {
		fail(fmt.Sprintf("the docker archive's config is %s, the oci layout's %v", dockerConfig, configs))
	}
	fmt.Printf("ok %s %s\n", reference, desc.Digest)
}

func unpack(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.Clean(h.Name))
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			out, err := os.Create(path)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unexpected type %c", h.Name, h.Typeflag)
		}
	}
}

func check(what string, err error) {
	if err != nil {
		fail(what + ": " + err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "ocicheck: "+msg)
	os.Exit(1)
}
