package controller

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/agent"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/engine"
)

// agentBinary is the operator's binary in a database pod (the agent's
// init container copies it there): PostgreSQL's archive_command runs it.
const agentBinary = "/agent/manager"

// archives says whether the Database archives continuously: PostgreSQL's
// WAL, MariaDB's binary log (MySQL's is refused by the API: its GTIDs are
// not MariaDB's, and no MySQL server runs here to prove it).
func archives(db *dbv1.Database) bool {
	return db.Spec.Backup.Archiving() && (db.Spec.Engine == dbv1.EnginePostgreSQL || db.Spec.Engine == dbv1.EngineMariaDB)
}

// archiveValues are the chart's archive values: PostgreSQL's
// archive_command pushing each completed WAL segment to the Database's
// backup target (wal-push with the flags a backup Job gets), or the
// MariaDB agent's binary log archive (the same flags); and what the
// database container needs for that target (S3 credentials, the backup
// claim, the S3 endpoint's CA).
func archiveValues(db *dbv1.Database) map[string]any {
	if !archives(db) {
		return map[string]any{"enabled": false}
	}
	tp := targetForPod(db.Spec.Backup.Target, db)
	timeout := int64(dbv1.DefaultArchiveTimeoutSeconds)
	if t := db.Spec.Backup.Archive.TimeoutSeconds; t != nil {
		timeout = int64(*t)
	}
	values := map[string]any{
		"enabled":        true,
		"timeoutSeconds": timeout,
		"env":            toValues(tp.env),
		"volumes":        toValues(tp.volumes),
		"mounts":         toValues(tp.mounts),
	}
	if db.Spec.Engine == dbv1.EnginePostgreSQL {
		args := append([]string{agentBinary, "wal-push"}, tp.args...)
		args = append(args, "--prefix="+archiveOf(db).path)
		values["command"] = shellJoin(args) + " %p"
		values["walStream"] = append(append([]any{}, toAny(tp.args)...), "--prefix="+archiveOf(db).path)
	} else {
		args := append(append([]any{}, toAny(tp.args)...), "--prefix="+archiveOf(db).path)
		values["binlogArchive"] = args
	}
	if s3 := db.Spec.Backup.Target.S3; s3 != nil {
		// The primary's server (or agent) reaches the endpoint itself:
		// the network policy lets it out on the endpoint's port.
		values["egressPort"] = s3Port(s3.Endpoint)
	}
	return values
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// s3Port is the TCP port of an S3 endpoint, as the store reads it; 443
// for one it would refuse (the API and the backup Job say why).
func s3Port(endpoint string) int64 {
	port, err := storage.EndpointPort(endpoint)
	if err != nil {
		return 443
	}
	return int64(port)
}

// shellWord is a word sh takes as it is.
var shellWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellJoin joins words into a command line for sh, quoting those that
// need it.
func shellJoin(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if shellWord.MatchString(w) {
			out[i] = w
			continue
		}
		out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// toValues turns API objects into the plain maps chart values hold.
func toValues[T any](objs []T) []any {
	out := make([]any, 0, len(objs))
	for i := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&objs[i])
		if err != nil {
			panic(fmt.Sprintf("converting %T: %v", objs[i], err)) // API types always convert
		}
		out = append(out, m)
	}
	return out
}

// reconcileArchiveTarget creates the default backup claim when the WAL is
// archived to the default volume target: the database pods mount it, and
// a pod whose claim does not exist never starts. (A backup Job creates it
// too; archiving may come first.)
func (r *DatabaseReconciler) reconcileArchiveTarget(ctx context.Context, db *dbv1.Database, _ *observed) error {
	if !archives(db) {
		return nil
	}
	return ensureBackupClaim(ctx, r.Client, db, db.Spec.Backup.Target)
}

// archiveCheckInterval is how often the primary's archiver is read when
// nothing else brings a reconcile: a target can fail with nothing in the
// cluster changing.
const archiveCheckInterval = 30 * time.Second

// archiveState is the ContinuousArchiving condition the Archive phase saw.
type archiveState struct {
	status          metav1.ConditionStatus
	reason, message string
	// gap, for MariaDB, is the last gap in the binary log archive the
	// primary's agent found (a file lost before it was archived), and
	// gapAt when: no recovery crosses it until a Backup completes after.
	gap   string
	gapAt time.Time
	// lastArchived is when the primary last archived a segment (zero
	// when unknown): status.lastRecoverableTime.
	lastArchived time.Time
}

// observeArchive reads the primary's WAL archiver (with spec.backup.archive)
// for the ContinuousArchiving condition, and says in an Event when
// archiving starts failing and when it recovers: a failing archive is
// never silent (the primary keeps the WAL it could not archive, and its
// volume fills).
func (r *DatabaseReconciler) observeArchive(ctx context.Context, db *dbv1.Database, obs *observed) error {
	if r.Instances == nil || !archives(db) {
		return nil
	}
	obs.requeueWithin(archiveCheckInterval)
	obs.archive = r.readArchiver(ctx, db, obs)
	was := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionContinuousArchiving)
	switch {
	case obs.archive.status == metav1.ConditionFalse && (was == nil || was.Status != metav1.ConditionFalse):
		r.event(db, corev1.EventTypeWarning, "ArchivingFailed", "Archive", "%s", obs.archive.message)
	case obs.archive.status == metav1.ConditionTrue && was != nil && was.Status == metav1.ConditionFalse:
		r.event(db, corev1.EventTypeNormal, "ArchivingResumed", "Archive", "%s", obs.archive.message)
	}
	return nil
}

func (r *DatabaseReconciler) readArchiver(ctx context.Context, db *dbv1.Database, obs *observed) *archiveState {
	primary := primaryName(db, obs)
	unknown := func(reason, format string, args ...any) *archiveState {
		return &archiveState{status: metav1.ConditionUnknown, reason: reason, message: fmt.Sprintf(format, args...)}
	}
	pod := podNamed(obs.pods, primary)
	if primary == "" || pod == nil || !podStarted(pod) {
		return unknown(dbv1.ReasonArchiverUnreadable, "the primary %q does not run: its archiver cannot be read", primary)
	}
	a, extra, err := r.archiverOf(ctx, db, obs, pod)
	mariadb := db.Spec.Engine == dbv1.EngineMariaDB
	switch {
	case err != nil:
		return unknown(dbv1.ReasonArchiverUnreadable, "reading %s's archiver: %v", primary, err)
	case a.Mode == "off" && mariadb:
		return unknown(dbv1.ReasonArchivingNotStarted, "%s's agent runs without the binary log archive yet: it starts archiving once restarted with it (the pods roll)", primary)
	case a.Mode == "off":
		return unknown(dbv1.ReasonArchivingNotStarted, "%s runs without archive_mode yet: it starts archiving once restarted with it (the pods roll)", primary)
	case a.Failing() && mariadb:
		what := "its binary log"
		if a.LastFailed != "" {
			what = "the binary log file " + a.LastFailed
		}
		return &archiveState{status: metav1.ConditionFalse, reason: dbv1.ReasonArchivingFailing, lastArchived: extra.closedAt, message: fmt.Sprintf(
			"%s fails to archive %s (%s; last attempt %s, %d failures since the agent started; %s): the server keeps its binary logs %s (binlog_expire_logs_seconds), "+
				"after which what was not archived is lost to point-in-time recovery", primary, what, extra.lastError, a.LastFailedAt.UTC().Format(time.RFC3339), a.Failed, lastArchivedText(a), binlogKept)}
	case a.Failing():
		return &archiveState{status: metav1.ConditionFalse, reason: dbv1.ReasonArchivingFailing, lastArchived: a.LastArchivedAt, message: fmt.Sprintf(
			"%s fails to archive %s (last attempt %s, %d failures since it started; %s): it keeps every WAL file from it on until the target takes them, and its volume fills; "+
				"the reason is in its log (wal-push)", primary, a.LastFailed, a.LastFailedAt.UTC().Format(time.RFC3339), a.Failed, lastArchivedText(a))}
	case a.Archived == 0 && mariadb:
		return unknown(dbv1.ReasonNothingArchivedYet, "%s has finished no binary log file since its agent started (one closes at most archive timeoutSeconds after a write)", primary)
	case a.Archived == 0:
		return unknown(dbv1.ReasonNothingArchivedYet, "%s has completed no WAL segment since it started (one closes when full, or archive_timeout after a write)", primary)
	}
	if mariadb {
		// The archive holds every transaction before the last file's
		// close (or the last streamed piece's last event), not its upload
		// (a promoted replica uploads old files). That moment is
		// lastRecoverableTime: the message, which moves only with whole
		// files, leaves it out.
		return &archiveState{status: metav1.ConditionTrue, reason: dbv1.ReasonBinlogArchived, lastArchived: extra.closedAt, gap: extra.gap, gapAt: extra.gapAt,
			message: fmt.Sprintf("%s archived the binary log file %s at %s (%d files since its agent started), and streams the file it writes", primary, a.LastArchived,
				a.LastArchivedAt.UTC().Format(time.RFC3339), a.Archived)}
	}
	// The streamed WAL is recoverable up to the agent's mark: the moment
	// stays out of the message, which moves only with whole segments.
	last := a.LastArchivedAt
	if extra.closedAt.After(last) {
		last = extra.closedAt
	}
	msg := fmt.Sprintf("%s archived %s at %s (%d files since it started)", primary, a.LastArchived, a.LastArchivedAt.UTC().Format(time.RFC3339), a.Archived)
	if extra.lastError != "" {
		// Nothing is lost (whole segments still go), but a write waits
		// for its segment to close again: say so.
		msg += fmt.Sprintf("; streaming the segment it writes fails (%s): a write reaches the archive only when its segment closes", extra.lastError)
	}
	return &archiveState{status: metav1.ConditionTrue, reason: dbv1.ReasonWALArchived, lastArchived: last, message: msg}
}

// binlogKept is how long the chart's MariaDB servers keep their binary
// logs (binlog-expire-logs-seconds in its configmap).
const binlogKept = "3 days"

func lastArchivedText(a engine.Archiver) string {
	if a.Archived == 0 {
		return "nothing archived since it started"
	}
	return fmt.Sprintf("last archived %s at %s", a.LastArchived, a.LastArchivedAt.UTC().Format(time.RFC3339))
}

// archiverOf reads the primary's archiver: PostgreSQL's from the server
// (pg_stat_archiver), MariaDB's from its agent, which archives the binary
// log.
// binlogExtra is what a MariaDB agent's archiver says beyond engine.Archiver.
type binlogExtra struct {
	closedAt, gapAt time.Time
	gap, lastError  string
}

func (r *DatabaseReconciler) archiverOf(ctx context.Context, db *dbv1.Database, obs *observed, pod *corev1.Pod) (engine.Archiver, binlogExtra, error) {
	if db.Spec.Engine == dbv1.EnginePostgreSQL {
		inst, err := obs.instances.get(ctx, pod)
		if err != nil {
			return engine.Archiver{}, binlogExtra{}, err
		}
		a, err := inst.Archiver(ctx)
		if err != nil {
			return a, binlogExtra{}, err
		}
		// What the agent streamed of the segment the server writes moves
		// the recoverable time; without it, whole segments still do.
		var extra binlogExtra
		if st, serr := r.askArchiver(ctx, obs, pod); serr == nil && st.WALStream != nil {
			extra.closedAt, extra.lastError = st.WALStream.RecoverableAt, st.WALStream.LastError
		}
		return a, extra, nil
	}
	st, err := r.askArchiver(ctx, obs, pod)
	if err != nil {
		return engine.Archiver{}, binlogExtra{}, err
	}
	a := engine.Archiver{Mode: "on", Archived: st.Archived, LastArchived: st.LastArchived, LastArchivedAt: st.LastArchivedAt,
		Failed: st.Failed, LastFailed: st.LastFailed, LastFailedAt: st.LastFailedAt}
	if !st.Enabled {
		a.Mode = "off"
	}
	if !st.Failing() && a.Failing() {
		// A piece of the file it writes was streamed since the failure:
		// archiving works again, before the next whole file.
		a.LastArchivedAt = st.LastStreamedAt
	}
	return a, binlogExtra{closedAt: st.LastClosedAt, gap: st.LastGap, gapAt: st.LastGapAt, lastError: st.LastError}, nil
}

// askArchiver asks the agent of pod for its archiver's state.
func (r *DatabaseReconciler) askArchiver(ctx context.Context, obs *observed, pod *corev1.Pod) (agent.BinlogArchiving, error) {
	if r.Archivers == nil {
		return agent.BinlogArchiving{}, errors.New("the operator does not reach the agents")
	}
	ep, err := obs.instances.endpoint(ctx, pod)
	if err != nil {
		return agent.BinlogArchiving{}, err
	}
	repl, err := obs.instances.replication(ctx)
	if err != nil {
		return agent.BinlogArchiving{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var opts engine.Options
	if err := obs.instances.connector.tlsOptions(ctx, obs.instances.db, ep, &opts); err != nil {
		return agent.BinlogArchiving{}, err
	}
	return r.Archivers(ctx, ep.Host, agent.PeerToken(repl.Password), opts.TLS)
}

// setArchiveCondition sets ContinuousArchiving from what the Archive phase
// saw, and removes it without archiving.
func setArchiveCondition(st *dbv1.DatabaseStatus, db *dbv1.Database, obs *observed) {
	switch {
	case !archives(db):
		meta.RemoveStatusCondition(&st.Conditions, dbv1.ConditionContinuousArchiving)
	case obs.archive != nil && obs.archive.gap != "" && (obs.lastSuccessfulBackup == nil || obs.lastSuccessfulBackup.Time.Before(obs.archive.gapAt)):
		// A gap is never silent: False until a Backup completes after it.
		setCondition(st, db, dbv1.ConditionContinuousArchiving, metav1.ConditionFalse, dbv1.ReasonArchiveGap, fmt.Sprintf(
			"the binary log archive has a gap (%s, found %s): no recovery crosses it; take a Backup now to restore to moments after it", obs.archive.gap, obs.archive.gapAt.UTC().Format(time.RFC3339)))
	case obs.archive != nil:
		setCondition(st, db, dbv1.ConditionContinuousArchiving, obs.archive.status, obs.archive.reason, obs.archive.message)
	}
}

// setRecoverability sets the window a point-in-time recovery reaches: from
// the oldest physical Backup that records the archive to the primary's
// last archived segment. Without archiving there is none.
func setRecoverability(st *dbv1.DatabaseStatus, db *dbv1.Database, obs *observed) {
	if !archives(db) {
		st.FirstRecoverabilityPoint, st.LastRecoverableTime = nil, nil
		return
	}
	if obs.backupsObserved {
		st.FirstRecoverabilityPoint = obs.firstRecoverable // nil once no such Backup is left
	}
	if obs.archive != nil && !obs.archive.lastArchived.IsZero() {
		// Whole seconds, rounded down: the moment stays inside the window.
		at := metav1.NewTime(obs.archive.lastArchived.Truncate(time.Second))
		st.LastRecoverableTime = &at
	}
}
