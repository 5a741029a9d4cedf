package monitoring

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ContractFile is the documented table of every series the agents and the
// operator export: the metric contract the alerts and the dashboard are
// checked against, and which the main module's tests check against real
// scrapes of each engine and of the operator.
const ContractFile = "docs/monitoring.md"

// Contract is every metric name of ContractFile, by the type it has
// (gauge, counter, histogram): the rows "| `name` | type | ...".
var Contract = mustContract(root)

// contractRow is one row of a metric table of ContractFile.
var contractRow = regexp.MustCompile("(?m)^\\| `([a-z_:][a-z0-9_:]*)` \\| (gauge|counter|histogram) \\|")

// ParseContract reads the metric tables of the contract file under root.
func ParseContract(root string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(root, ContractFile))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range contractRow.FindAllSubmatch(b, -1) {
		out[string(m[1])] = string(m[2])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no metric table", ContractFile)
	}
	return out, nil
}

func mustContract(root string) map[string]string {
	c, err := ParseContract(root)
	if err != nil {
		panic(err)
	}
	return c
}

// root is the repository (this module is hack/tools/promtool); the
// checks run from the package's directory.
const root = "../../../.."

// standardPrefixes are the series controller-runtime exports in the
// operator (its reconcile counters and work queues).
var standardPrefixes = []string{"controller_runtime_", "workqueue_"}

// InContract reports whether name is a series the contract promises: a
// contract name, a histogram's _bucket, _sum or _count, controller-runtime's
// own, or Prometheus's up.
func InContract(name string) bool {
	if name == "up" {
		return true
	}
	if _, ok := Contract[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && Contract[base] == "histogram" {
			return true
		}
	}
	for _, p := range standardPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
