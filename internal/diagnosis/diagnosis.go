// Package diagnosis tells why a database instance's pod does not run: from
// the pod's status (not scheduled, its claim not bound, its container not
// created, pulled or crash-looping) and, for a container that failed, the
// probable cause read from the last lines it logged. The operator writes
// the result into the Database's status; a command-line client can run
// the same functions on what it reads.
package diagnosis

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Cause is the probable cause of a failed server, read from its log.
type Cause string

// The causes a failed server's log is classified into.
const (
	DiskFull             Cause = "DiskFull"
	AuthenticationFailed Cause = "AuthenticationFailed"
	CorruptDataDirectory Cause = "CorruptDataDirectory"
	VersionDowngrade     Cause = "VersionDowngrade"
	ConfigurationError   Cause = "ConfigurationError"
	OutOfMemory          Cause = "OutOfMemory"
	Unknown              Cause = "Unknown"
)

// Reasons a pod's failure has beyond the kubelet's own waiting reasons.
const (
	ReasonUnschedulable        = "Unschedulable"
	ReasonClaimPending         = "ClaimPending"
	ReasonOOMKilled            = "OOMKilled"
	ReasonCrashLoopBackOff     = "CrashLoopBackOff"
	ReasonRestartingRepeatedly = "RestartingRepeatedly"
)

// RepeatedRestarts is how many restarts make a running container one that
// restarts repeatedly.
const RepeatedRestarts = 3

// DocsURL is where the project's documentation lives; Runbook links point
// into it.
const DocsURL = "https://example.com/database-operator/source/blob/main/docs/"

// Runbook is the page that explains a cause (or, without one, a reason) and
// how to mitigate it.
func Runbook(reason string, cause Cause) string {
	anchor := reason
	if cause != "" && cause != Unknown {
		anchor = string(cause)
	}
	return DocsURL + "troubleshooting.md#" + strings.ToLower(anchor)
}

// Failure is what keeps one pod from running.
type Failure struct {
	Reason       string
	Container    string
	ExitCode     *int32
	RestartCount int32
	// Message is what the kubelet or the scheduler said.
	Message string
	// NeedsLog: the container ran and failed; its previous log tells why.
	NeedsLog bool
}

// UnschedulableGrace is how long the scheduler must have found no node for
// a pod before it counts as failing.
const UnschedulableGrace = 30 * time.Second

// OfPod returns why the pod does not run, or nil when it runs (or is only
// starting). pendingClaim names the pod's claim when it is not bound.
func OfPod(p *corev1.Pod, pendingClaim string, now time.Time) *Failure {
	if !p.DeletionTimestamp.IsZero() {
		return nil
	}
	for _, c := range p.Status.Conditions {
		// Only once the scheduler said so for a while: a claim waiting for
		// its first consumer, or a node autoscaler, makes it say so briefly.
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
			now.Sub(c.LastTransitionTime.Time) >= UnschedulableGrace {
			if pendingClaim != "" {
				return &Failure{Reason: ReasonClaimPending, Message: fmt.Sprintf("claim %s is not bound: %s", pendingClaim, c.Message)}
			}
			return &Failure{Reason: ReasonUnschedulable, Message: c.Message}
		}
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for i := range statuses {
		if f := ofContainer(&statuses[i]); f != nil {
			return f
		}
	}
	return nil
}

func ofContainer(c *corev1.ContainerStatus) *Failure {
	f := &Failure{Container: c.Name, RestartCount: c.RestartCount}
	last := c.LastTerminationState.Terminated
	if last != nil {
		code := last.ExitCode
		f.ExitCode = &code
	}
	switch w := c.State.Waiting; {
	case w != nil && w.Reason == ReasonCrashLoopBackOff:
		f.Reason, f.Message, f.NeedsLog = w.Reason, w.Message, true
		if last != nil && last.Reason == ReasonOOMKilled {
			f.Reason = ReasonOOMKilled
		}
		return f
	case w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing":
		// CreateContainerConfigError, CreateContainerError, ImagePullBackOff,
		// ErrImagePull, InvalidImageName, ...: it never ran.
		f.Reason, f.Message = w.Reason, w.Message
		f.ExitCode = nil
		return f
	case last != nil && last.Reason == ReasonOOMKilled:
		f.Reason, f.Message, f.NeedsLog = ReasonOOMKilled, last.Message, true
		return f
	case c.RestartCount >= RepeatedRestarts && last != nil && last.ExitCode != 0 && c.State.Running != nil && !c.Ready:
		f.Reason, f.Message, f.NeedsLog = ReasonRestartingRepeatedly, last.Message, true
		return f
	}
	return nil
}

// pattern maps log lines to a cause. The first cause with a matching line
// wins, in the order of the table: the most specific first.
type pattern struct {
	cause Cause
	re    *regexp.Regexp
}

// pgInitializedBy is PostgreSQL's detail of "database files are
// incompatible with server": the data's major version and the server's.
var pgInitializedBy = regexp.MustCompile(`initialized by PostgreSQL version (\d+)[^,]*, which is not compatible with this version (\d+)`)

var patterns = []pattern{
	{DiskFull, regexp.MustCompile(`(?i)no space left on device|disk (is )?full|could not extend file|errno: ?28\b|OS error code 28\b|out of disk space`)},
	{VersionDowngrade, regexp.MustCompile(`(?i)created by a newer|downgrade|Unsupported redo log format`)},
	{OutOfMemory, regexp.MustCompile(`(?i)out of memory|cannot allocate memory|could not map anonymous shared memory|Cannot map innodb_buffer_pool|\bOOM\b`)},
	{AuthenticationFailed, regexp.MustCompile(`(?i)password authentication failed|authentication failed|Access denied for user|no pg_hba\.conf entry`)},
	{ConfigurationError, regexp.MustCompile(`(?i)unrecognized configuration parameter|invalid value for parameter|unknown variable|unknown option|Error while setting value|ambiguous option|parameter .* cannot be changed`)},
	{CorruptDataDirectory, regexp.MustCompile(`(?i)corrupt|invalid (primary |secondary )?checkpoint record|could not locate a valid checkpoint|incorrect checksum in control file|PG_CONTROL_VERSION|pg_control|is not a valid data directory|could not open file "(global|base)/|invalid magic number|Cannot open datafile|marked as crashed|Missing system table|Plugin 'InnoDB' (init function returned error|registration as a STORAGE ENGINE failed)|Can't open and lock privilege tables|incompatible with server`)},
}

// Classify reads the probable cause from the last lines a failed server
// logged, and returns the line it read it from (empty for Unknown).
// terminated is the container's last termination reason: OOMKilled says
// more than any line.
func Classify(log, terminated string) (Cause, string) {
	if terminated == ReasonOOMKilled {
		return OutOfMemory, "the container was killed at its memory limit (OOMKilled)"
	}
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	for i, l := range lines {
		lines[i] = plain(l)
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if m := pgInitializedBy.FindStringSubmatch(lines[i]); m != nil {
			data, _ := strconv.Atoi(m[1])
			server, _ := strconv.Atoi(m[2])
			if data > server {
				return VersionDowngrade, trim(lines[i])
			}
			return CorruptDataDirectory, trim(lines[i]) // an older major: pg_upgrade's, not the server's
		}
	}
	// Warnings and notes only when no other line names a cause: a server
	// starting logs refused probes ("[Warning] Access denied ...") on its
	// way to the error that stops it.
	for _, skipMinor := range []bool{true, false} {
		for _, p := range patterns {
			// The last matching line: nearest the failure.
			for i := len(lines) - 1; i >= 0; i-- {
				if skipMinor && minor.MatchString(lines[i]) {
					continue
				}
				if p.re.MatchString(lines[i]) {
					return p.cause, trim(lines[i])
				}
			}
		}
	}
	return Unknown, ""
}

// minor marks a warning or a note (MariaDB, MySQL, PostgreSQL).
var minor = regexp.MustCompile(`\[(Warning|Note|System)\]|\bWARNING:  `)

// plain is a PostgreSQL JSON log line (jsonlog, as the agent relays it)
// as the server's plain log would have it: "FATAL:  message", then its
// detail. A line that is not one is returned as it is.
func plain(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var entry struct {
		Severity string `json:"error_severity"`
		Message  string `json:"message"`
		Detail   string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(line), &entry); err != nil || entry.Message == "" {
		return line
	}
	s := entry.Severity + ":  " + entry.Message
	if entry.Detail != "" {
		s += " DETAIL:  " + entry.Detail
	}
	return s
}

// trim bounds a log line for a status message.
func trim(s string) string {
	s = strings.TrimSpace(s)
	const maxLen = 300
	if len(s) > maxLen {
		s = s[:maxLen] + "..."
	}
	return s
}

// Summary is one line naming the pod's failure: what a condition message
// and an Event say.
func Summary(pod string, f *Failure, cause Cause, evidence string) string {
	var b strings.Builder
	b.WriteString(pod)
	if f.Container != "" {
		fmt.Fprintf(&b, ": container %s", f.Container)
	}
	fmt.Fprintf(&b, ": %s", f.Reason)
	if f.ExitCode != nil {
		fmt.Fprintf(&b, ", exit code %s", strconv.Itoa(int(*f.ExitCode)))
	}
	if f.RestartCount > 0 {
		fmt.Fprintf(&b, ", restarted %d times", f.RestartCount)
	}
	if cause != "" {
		fmt.Fprintf(&b, "; probable cause: %s", cause)
	}
	switch {
	case evidence != "":
		fmt.Fprintf(&b, " (%s)", evidence)
	case f.Message != "":
		fmt.Fprintf(&b, " (%s)", trim(f.Message))
	}
	fmt.Fprintf(&b, "; see %s", Runbook(f.Reason, cause))
	return b.String()
}
