// Command scorecard-local runs a bundle's scorecard tests the way
// `operator-sdk scorecard` does, without a cluster or a container runtime:
// each test's entrypoint (scorecard-test for the standard basic and olm
// suites, database-scorecard for this project's) runs as a local program in
// a private mount namespace where the bundle is bind-mounted on /bundle,
// the path a scorecard test pod sees. It prints every result and fails
// unless all pass. It needs root (for the mount namespace); CI runs as root.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	scapi "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"sigs.k8s.io/yaml"
)

func main() {
	bundle := flag.String("bundle", "bundle", "bundle directory")
	path := flag.String("path", "", "directories searched first for the test entrypoints (colon-separated)")
	flag.Parse()
	ok, err := run(*bundle, *path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scorecard-local:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(bundle, path string) (bool, error) {
	if os.Geteuid() != 0 {
		return false, fmt.Errorf("needs root: each test runs in a private mount namespace with the bundle on /bundle")
	}
	abs, err := filepath.Abs(bundle)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile(filepath.Join(abs, "tests", "scorecard", "config.yaml"))
	if err != nil {
		return false, fmt.Errorf("reading the bundle's scorecard configuration: %w", err)
	}
	var cfg scapi.Configuration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return false, fmt.Errorf("parsing the scorecard configuration: %w", err)
	}
	// The mount point must exist on the host; the mount itself stays private.
	if err := os.MkdirAll("/bundle", 0o755); err != nil {
		return false, err
	}
	env := os.Environ()
	if path != "" {
		env = append(env, "PATH="+path+":"+os.Getenv("PATH"))
	}
	allPass, n := true, 0
	for _, stage := range cfg.Stages {
		for _, test := range stage.Tests {
			n++
			results, err := runTest(abs, test, env)
			if err != nil {
				results = []scapi.TestResult{{Name: test.Labels["test"], State: scapi.ErrorState, Errors: []string{err.Error()}}}
			}
			for _, r := range results {
				fmt.Printf("%-8s %-36s %s\n", test.Labels["suite"], r.Name, r.State)
				for _, e := range r.Errors {
					fmt.Printf("         error: %s\n", e)
				}
				for _, s := range r.Suggestions {
					fmt.Printf("         suggestion: %s\n", s)
				}
				allPass = allPass && r.State == scapi.PassState
			}
		}
	}
	if n == 0 {
		return false, fmt.Errorf("the scorecard configuration has no tests")
	}
	return allPass, nil
}

func runTest(bundle string, test scapi.TestConfiguration, env []string) ([]scapi.TestResult, error) {
	if len(test.Entrypoint) == 0 {
		return nil, fmt.Errorf("test %s has no entrypoint", test.Labels["test"])
	}
	args := append([]string{"-m", "--", "sh", "-c", `mount --bind "$1" /bundle && shift && exec "$@"`, "sh", bundle}, test.Entrypoint...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", strings.Join(test.Entrypoint, " "), err, strings.TrimSpace(stderr.String()))
	}
	var status scapi.TestStatus
	if err := json.Unmarshal(out, &status); err != nil {
		return nil, fmt.Errorf("%s printed no TestStatus: %w", strings.Join(test.Entrypoint, " "), err)
	}
	if len(status.Results) == 0 {
		return nil, fmt.Errorf("%s reported no result", strings.Join(test.Entrypoint, " "))
	}
	return status.Results, nil
}
