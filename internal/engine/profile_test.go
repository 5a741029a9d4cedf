package engine

import (
	"testing"

	dbv1 "example.com/database-operator/api/v1"
)

// TestEveryEngineHasAProfile: an engine the API admits without a profile
// would silently get MySQL's.
func TestEveryEngineHasAProfile(t *testing.T) {
	for _, e := range dbv1.Engines() {
		p, ok := profiles[e]
		if !ok {
			t.Errorf("engine %s has no profile", e)
			continue
		}
		if p.Port == 0 || p.PortName == "" || p.Scheme == "" || p.Superuser == "" || p.Client == "" || p.Dump == "" {
			t.Errorf("engine %s: incomplete profile %+v", e, p)
		}
	}
}
