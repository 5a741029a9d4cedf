package backup

import (
	"encoding/json"
	"strings"
	"time"
)

// Result is what a backup or restore Job reports to the operator, as its
// container's termination message (Kubernetes keeps up to 4096 bytes of it
// in the pod's status): no access to the target or the database is needed
// to learn the outcome.
type Result struct {
	Succeeded bool   `json:"succeeded"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`

	Location    string    `json:"location,omitempty"`
	Path        string    `json:"path,omitempty"`
	Version     string    `json:"version,omitempty"`
	Position    string    `json:"position,omitempty"`
	Size        int64     `json:"size,omitempty"`
	Checksum    string    `json:"checksum,omitempty"`
	StartedAt   time.Time `json:"startedAt,omitzero"`
	CompletedAt time.Time `json:"completedAt,omitzero"`
	// Pruned names the backups retention deleted.
	Pruned []string `json:"pruned,omitempty"`
	// PrunedWAL counts the archived files (WAL segments or binary log
	// files) retention deleted; WALKeptFrom is where what is kept begins
	// (Pruned.ArchiveKeptFrom). The JSON names predate binary log archives.
	PrunedWAL   int    `json:"prunedWAL,omitempty"`
	WALKeptFrom string `json:"walKeptFrom,omitempty"`
}

// MaxResultSize is the termination message limit.
const MaxResultSize = 4096

// Encode marshals r to at most MaxResultSize bytes, shortening the message
// and the pruned list when needed (the operator finds any backup left out
// of Pruned gone at the next retention run).
func (r Result) Encode() []byte {
	for {
		b, _ := json.Marshal(r)
		if len(b) <= MaxResultSize {
			return b
		}
		// The message gives way first: the pruned names tell the operator
		// which Backup objects to delete.
		switch {
		case len(r.Message) > 512:
			r.Message = strings.ToValidUTF8(r.Message[:500], "") + " [cut]"
		case r.Message != "" || r.Location != "":
			r.Message, r.Location = "", ""
		default:
			r.Pruned = r.Pruned[:len(r.Pruned)/2]
		}
	}
}

// DecodeResult parses a termination message.
func DecodeResult(b []byte) (Result, error) {
	var r Result
	err := json.Unmarshal(b, &r)
	return r, err
}

// ResultOf is the Result of a finished backup.
func ResultOf(m *Manifest, location string, pruned Pruned, err error) Result {
	if m == nil {
		return Result{Reason: ReasonOf(err), Message: err.Error()}
	}
	r := Result{Succeeded: true, Reason: "Completed", Location: location, Path: Path(m.Namespace, m.Database, m.Backup),
		Version: m.Version, Position: m.Position, Size: m.Size(), Checksum: m.Checksum(),
		StartedAt: m.StartedAt, CompletedAt: m.CompletedAt, Pruned: pruned.Backups,
		PrunedWAL: pruned.Archived, WALKeptFrom: pruned.ArchiveKeptFrom}
	if err != nil {
		r.Message = err.Error() // retention failed; the backup is good
	}
	return r
}
