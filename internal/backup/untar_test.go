package backup

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"
)

func writeTar(t *testing.T, entries []tar.Header) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "base.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := tar.NewWriter(f)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "contents of " + h.Name
			h.Size = int64(len(body))
		}
		if err := w.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUntar: a data directory's entries land under dest with their modes;
// a name that climbs out of it, an absolute one, or an entry no data
// directory holds (a device) is refused.
func TestUntar(t *testing.T) {
	good := writeTar(t, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o700},
		{Name: "PG_VERSION", Typeflag: tar.TypeReg, Mode: 0o600},
		{Name: "base/1/", Typeflag: tar.TypeDir, Mode: 0o700},
		{Name: "base/1/1259", Typeflag: tar.TypeReg, Mode: 0o600},
		{Name: "pg_wal/000000010000000000000002", Typeflag: tar.TypeReg, Mode: 0o600},
		{Name: "pg_tblspc/16384", Typeflag: tar.TypeSymlink, Linkname: "/srv/tablespace"},
	})
	dest := filepath.Join(t.TempDir(), "data")
	if err := untar(good, dest); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "base/1/1259")); err != nil || string(b) != "contents of base/1/1259" {
		t.Errorf("base/1/1259: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dest, "PG_VERSION")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("PG_VERSION: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(dest, "pg_tblspc/16384")); err != nil || l != "/srv/tablespace" {
		t.Errorf("the tablespace link: %q %v", l, err)
	}
	for name, h := range map[string]tar.Header{
		"climbs out": {Name: "../escaped", Typeflag: tar.TypeReg, Mode: 0o600},
		"deep climb": {Name: "base/../../escaped", Typeflag: tar.TypeReg, Mode: 0o600},
		"absolute":   {Name: "/etc/escaped", Typeflag: tar.TypeReg, Mode: 0o600},
		"a device":   {Name: "dev", Typeflag: tar.TypeChar, Mode: 0o600},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			err := untar(writeTar(t, []tar.Header{h}), filepath.Join(root, "data"))
			if err == nil {
				t.Fatal("unpacked")
			}
			if _, statErr := os.Stat(filepath.Join(root, "escaped")); statErr == nil {
				t.Error("a file landed outside the data directory")
			}
		})
	}
	// Through a symbolic link an earlier entry made: the name is inside,
	// the file would not be.
	for name, link := range map[string]string{"relative link": "..", "absolute link": ""} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if link == "" {
				link = root
			}
			err := untar(writeTar(t, []tar.Header{
				{Name: "out", Typeflag: tar.TypeSymlink, Linkname: link},
				{Name: "out/escaped", Typeflag: tar.TypeReg, Mode: 0o600},
			}), filepath.Join(root, "data"))
			if err == nil {
				t.Error("unpacked through a link out of the data directory")
			}
			if _, statErr := os.Stat(filepath.Join(root, "escaped")); statErr == nil {
				t.Error("a file landed outside the data directory")
			}
		})
	}
}
