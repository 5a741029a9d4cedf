package processnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// A claim's volume is an ext4 filesystem of the claim's size, in a sparse
// file loop-mounted at the claim's directory: a database that fills its
// volume gets ENOSPC at the claim's size, as on a real disk, and growing the
// claim grows the filesystem online. Where loop devices cannot be used the
// volume is a plain directory and its size is not enforced (logged).

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func imageOf(path string) string { return path + ".img" }

// makeVolume makes the volume at path with size bytes. notSized says why
// it fell back to a plain directory; err is a volume that could not be
// made at all.
func makeVolume(ctx context.Context, path string, size int64) (notSized, err error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, err
	}
	if mounted(path) {
		return nil, nil // provisioned already (an update seen twice)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	img := imageOf(path)
	f, err := os.Create(img)
	if err != nil {
		return err, nil
	}
	err = f.Truncate(size)
	f.Close()
	if err == nil {
		// No reserved blocks: the claim's size is what the pod may fill.
		err = run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", img)
	}
	if err == nil {
		err = run(ctx, "mount", "-o", "loop", img, path)
	}
	if err != nil {
		_ = os.Remove(img)
		return err, nil
	}
	// mkfs leaves lost+found: a data directory must start empty.
	_ = os.RemoveAll(filepath.Join(path, "lost+found"))
	return nil, nil
}

// growVolume grows a loop-mounted volume's filesystem to size bytes, online.
func growVolume(ctx context.Context, path string, size int64) error {
	img := imageOf(path)
	if !mounted(path) {
		return nil // a plain directory: nothing to grow
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := os.Truncate(img, size); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "losetup", "-j", img).Output()
	dev, _, _ := strings.Cut(string(out), ":")
	if err != nil || dev == "" {
		return fmt.Errorf("finding the loop device of %s: %w", img, err)
	}
	if err := run(ctx, "losetup", "-c", dev); err != nil {
		return err
	}
	return run(ctx, "resize2fs", dev)
}

// removeVolume unmounts a volume and deletes its data.
func removeVolume(ctx context.Context, path string) error {
	if mounted(path) {
		if err := run(ctx, "umount", path); err != nil {
			return err
		}
	}
	_ = os.Remove(imageOf(path))
	return os.RemoveAll(path)
}

// unmountVolumes unmounts every volume under dir (the node stopping); the
// data stays.
func unmountVolumes(dir string) {
	imgs, _ := filepath.Glob(filepath.Join(dir, "*.img"))
	for _, img := range imgs {
		path := strings.TrimSuffix(img, ".img")
		if mounted(path) {
			_ = exec.Command("umount", "-l", path).Run()
		}
	}
}

// mounted reports whether path is a mount point.
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
