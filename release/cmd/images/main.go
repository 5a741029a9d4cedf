// Command images builds the project's images in Go (no container engine)
// into an OCI image layout, and optionally pushes them to a registry.
// `make images` runs it; it expects the binaries built beforehand.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"example.com/database-operator/release/images"
	"example.com/database-operator/release/ociimage"
)

func main() {
	var (
		version   = flag.String("version", "", "release version (x.y.z)")
		manager   = flag.String("manager", "amd64=bin/manager-linux-amd64,arm64=bin/manager-linux-arm64", "static manager binaries, ARCH=PATH for each of "+strings.Join(images.Platforms, ", "))
		opm       = flag.String("opm", "", "opm binaries for the catalog image, ARCH=PATH for each platform")
		probe     = flag.String("grpc-health-probe", "", "grpc_health_probe binaries for the catalog image, ARCH=PATH for each platform")
		sdkTest   = flag.String("scorecard-test", "", "operator-sdk's scorecard-test binary")
		ownTest   = flag.String("database-scorecard", "", "this project's scorecard test binary")
		out       = flag.String("out", ".local/images", "OCI layout directory to write")
		push      = flag.String("push", "", "registry to push to as well (host:port), replacing "+images.Repo+"'s host")
		pushHTTPS = flag.Bool("push-https", false, "push over HTTPS (default: plain HTTP, for a registry on loopback)")
	)
	flag.Parse()
	if err := run(*version, *manager, *opm, *probe, *sdkTest, *ownTest, *out, *push, !*pushHTTPS); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(version, manager, opm, probe, sdkTest, ownTest, out, push string, insecure bool) error {
	if version == "" || opm == "" || probe == "" || sdkTest == "" || ownTest == "" {
		return fmt.Errorf("-version, -opm, -grpc-health-probe, -scorecard-test and -database-scorecard are required")
	}
	builds := map[string]map[string]string{}
	for flagName, value := range map[string]string{"manager": manager, "opm": opm, "grpc-health-probe": probe} {
		paths, err := archPaths(value)
		if err != nil {
			return fmt.Errorf("-%s: %w", flagName, err)
		}
		builds[flagName] = paths
	}
	built := map[string]ociimage.Artifact{}
	add := func(name string, img ociimage.Artifact, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		built[images.Ref(name, version)] = img
		return nil
	}
	m, err := images.Manager(builds["manager"], version)
	if err := add("manager", m, err); err != nil {
		return err
	}
	b, err := images.Bundle("bundle")
	if err := add("bundle", b, err); err != nil {
		return err
	}
	c, err := images.Catalog("catalog", builds["opm"], builds["grpc-health-probe"], version)
	if err := add("catalog", c, err); err != nil {
		return err
	}
	s, err := images.ScorecardTest(sdkTest, "scorecard-test", version)
	if err := add("scorecard-test", s, err); err != nil {
		return err
	}
	d, err := images.ScorecardTest(ownTest, "database-scorecard", version)
	if err := add("scorecard", d, err); err != nil {
		return err
	}
	if err := ociimage.WriteLayout(out, built); err != nil {
		return err
	}
	for ref, img := range built {
		digest, _ := img.Digest()
		fmt.Printf("%s %s\n", ref, digest)
		if push != "" {
			target := push + strings.TrimPrefix(ref, "example.com")
			if err := ociimage.Push(img, target, insecure); err != nil {
				return fmt.Errorf("pushing %s: %w", target, err)
			}
			fmt.Printf("  pushed %s\n", target)
		}
	}
	return nil
}

// archPaths reads ARCH=PATH,ARCH=PATH: a program's build for each
// platform.
func archPaths(value string) (map[string]string, error) {
	paths := map[string]string{}
	for _, pair := range strings.Split(value, ",") {
		arch, path, ok := strings.Cut(pair, "=")
		if !ok || arch == "" || path == "" {
			return nil, fmt.Errorf("%q is not ARCH=PATH", pair)
		}
		paths[arch] = path
	}
	return paths, nil
}
