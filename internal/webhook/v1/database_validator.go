package v1

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/parameters"
)

// Rule is one validation of a Database. old is nil on create. It returns
// admission warnings for risky but legal changes, field errors (each
// saying what to do instead) to refuse the request, and audit entries to
// record as Events when the request is admitted.
type Rule func(ctx context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit)

// Audit is a risky change worth an Event naming who made it.
type Audit struct {
	// Reason is the Event's reason (CamelCase).
	Reason string
	// Note says what changed; the requesting user is appended.
	Note string
}

// Event reasons of the audit Events.
const (
	ReasonAuditScaleDown      = "AuditScaleDown"
	ReasonAuditVersionChange  = "AuditVersionChange"
	ReasonAuditDeletionPolicy = "AuditDeletionPolicy"
	auditAction               = "Admit"
	unknownUser               = "(unknown user)"
)

// DatabaseValidator validates Database creates and updates with Rules; see
// the package comment for which rules live here and which in the CRD.
type DatabaseValidator struct {
	// Recorder records the audit Events (nil: none).
	Recorder events.EventRecorder
	// Rules run in order; all of them run, their findings are joined.
	// DefaultRules() is the built-in list; append to extend it.
	Rules []Rule

	// recorded remembers the audit Events recently recorded, so that one
	// change is recorded once (see audit).
	recorded recentSet
}

// recentSet is a set of keys that forgets them after ttl.
type recentSet struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

const auditDedupTTL = 10 * time.Minute

// add adds key and reports whether it was new.
func (r *recentSet) add(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]time.Time{}
	}
	for k, at := range r.seen {
		if now.Sub(at) > auditDedupTTL {
			delete(r.seen, k)
		}
	}
	if _, ok := r.seen[key]; ok {
		return false
	}
	r.seen[key] = now
	return true
}

var _ admission.Validator[*dbv1.Database] = &DatabaseValidator{}

// DefaultRules are the built-in rules.
func DefaultRules() []Rule {
	return []Rule{olderVersionKeepsV1Rules, switchoverTarget, primaryWithinReplicas, scaleDuringFailover, scaleDown, versionChange, deletionPolicyChange, synchronousAvailability, parametersKnown, resourcesConsistent}
}

// ValidateCreate runs the rules with no previous object.
func (v *DatabaseValidator) ValidateCreate(ctx context.Context, db *dbv1.Database) (admission.Warnings, error) {
	return v.validate(ctx, nil, db)
}

// ValidateUpdate runs the rules against the stored object. An update that
// leaves the spec as it was (finalizers, labels, annotations) is not
// judged: a Database admitted under older rules must stay possible to
// label, finalize and delete.
func (v *DatabaseValidator) ValidateUpdate(ctx context.Context, old, db *dbv1.Database) (admission.Warnings, error) {
	if equality.Semantic.DeepEqual(old.Spec, db.Spec) {
		return nil, nil
	}
	return v.validate(ctx, old, db)
}

// ValidateDelete allows every delete (deletionPolicy decides what stays).
func (v *DatabaseValidator) ValidateDelete(context.Context, *dbv1.Database) (admission.Warnings, error) {
	return nil, nil
}

func (v *DatabaseValidator) validate(ctx context.Context, old, db *dbv1.Database) (admission.Warnings, error) {
	var (
		warnings admission.Warnings
		errs     field.ErrorList
		audits   []Audit
	)
	for _, rule := range v.Rules {
		w, e, a := rule(ctx, old, db)
		warnings, errs, audits = append(warnings, w...), append(errs, e...), append(audits, a...)
	}
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(dbv1.GroupVersion.WithKind("Database").GroupKind(), db.Name, errs)
	}
	recordAudits(ctx, v.Recorder, &v.recorded, db, audits)
	return warnings, nil
}

// recordAudits records an Event per risky change, naming the requesting user. Only
// for admitted, real requests: a refused or dry-run request changed
// nothing. A later step can still fail the request (another webhook, the
// storage write). The common case is a conflict with the operator's own
// status writes: the API server validates against its cached object, the
// write then conflicts and is retried (by the API server, then by the
// client) with the same change. Such retries are recorded once: the key is
// the object's UID, the generation the change applies to (status writes do
// not move it), the change and the user.
func recordAudits(ctx context.Context, rec events.EventRecorder, recorded *recentSet, obj client.Object, audits []Audit) {
	if rec == nil || len(audits) == 0 {
		return
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil || (req.DryRun != nil && *req.DryRun) {
		return
	}
	user := req.UserInfo.Username
	if user == "" {
		user = unknownUser
	}
	for _, a := range audits {
		key := fmt.Sprintf("%s/%d/%s/%s/%s", obj.GetUID(), obj.GetGeneration(), a.Reason, a.Note, user)
		if recorded.add(key, time.Now()) {
			rec.Eventf(obj, nil, corev1.EventTypeNormal, a.Reason, auditAction, "%s (by %s)", a.Note, user)
		}
	}
}

// failoverInProgress says whether the stored Database is in the middle of
// a failover (its primary is unhealthy) or a switchover (spec.primary names
// another pod than the current primary), as the operator's Upgradeable
// report does.
func failoverInProgress(db *dbv1.Database) (string, bool) {
	switch {
	case db.Status.PrimaryUnhealthySince != nil:
		return "a failover of " + db.Status.CurrentPrimary, true
	case db.Spec.Primary != "" && db.Status.CurrentPrimary != "" && db.Spec.Primary != db.Status.CurrentPrimary:
		return "a switchover to " + db.Spec.Primary, true
	}
	return "", false
}

// switchoverTarget: a new spec.primary must name an instance that exists
// now (ordinal below status.replicas; the CRD already bounds it by
// spec.replicas), and cannot start while a failover is in progress.
func switchoverTarget(_ context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	if old == nil || db.Spec.Primary == "" || db.Spec.Primary == old.Spec.Primary {
		return nil, nil, nil
	}
	path := field.NewPath("spec", "primary")
	ordinal, err := strconv.Atoi(strings.TrimPrefix(db.Spec.Primary, db.Name+"-"))
	if err != nil || !strings.HasPrefix(db.Spec.Primary, db.Name+"-") {
		return nil, field.ErrorList{field.Invalid(path, db.Spec.Primary,
			fmt.Sprintf("name one of this Database's instances, %s-0 to %s-%d", db.Name, db.Name, db.Spec.Replicas-1))}, nil
	}
	if exists := old.Status.Replicas; int32(ordinal) >= exists {
		return nil, field.ErrorList{field.Invalid(path, db.Spec.Primary,
			fmt.Sprintf("instance %s does not exist yet (%d instances exist): wait until status.replicas is above %d, then set spec.primary", db.Spec.Primary, exists, ordinal))}, nil
	}
	if old.Status.PrimaryUnhealthySince != nil {
		return nil, field.ErrorList{field.Forbidden(path,
			fmt.Sprintf("a failover of %s is in progress: wait until the Ready condition is True, then ask for the switchover again", old.Status.CurrentPrimary))}, nil
	}
	return nil, nil, nil
}

// scaleDuringFailover: while a failover or switchover is in progress the
// healthy replicas are the candidates it may promote or must keep in step;
// scaling below their number could remove the one it needs.
func scaleDuringFailover(_ context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	if old == nil || db.Spec.Replicas >= old.Spec.Replicas {
		return nil, nil, nil
	}
	what, busy := failoverInProgress(old)
	if !busy || db.Spec.Replicas >= old.Status.ReadyReplicas {
		return nil, nil, nil
	}
	return nil, field.ErrorList{field.Forbidden(field.NewPath("spec", "replicas"),
		fmt.Sprintf("cannot scale from %d to %d while %s is in progress: %d instances are ready and the failover may need any of them; wait until the Ready condition is True, then scale down",
			old.Spec.Replicas, db.Spec.Replicas, what, old.Status.ReadyReplicas))}, nil
}

// scaleDown warns (and audits) when instances are about to go away.
func scaleDown(_ context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	if old == nil || db.Spec.Replicas >= old.Spec.Replicas {
		return nil, nil, nil
	}
	var gone []string
	for i := db.Spec.Replicas; i < old.Spec.Replicas; i++ {
		gone = append(gone, fmt.Sprintf("%s-%d", db.Name, i))
	}
	w := fmt.Sprintf("scaling down from %d to %d removes instance(s) %s; their volumes are kept (deletionPolicy applies only when the Database is deleted)",
		old.Spec.Replicas, db.Spec.Replicas, strings.Join(gone, ", "))
	return admission.Warnings{w}, nil, []Audit{{Reason: ReasonAuditScaleDown,
		Note: fmt.Sprintf("spec.replicas changed from %d to %d", old.Spec.Replicas, db.Spec.Replicas)}}
}

// versionChange audits every version change and warns on a major one (the
// CRD already refuses PostgreSQL major changes and MariaDB downgrades).
func versionChange(_ context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	if old == nil || old.Spec.Version == "" || db.Spec.Version == old.Spec.Version {
		return nil, nil, nil
	}
	audits := []Audit{{Reason: ReasonAuditVersionChange,
		Note: fmt.Sprintf("spec.version changed from %s to %s", old.Spec.Version, db.Spec.Version)}}
	if major(old.Spec.Version) == major(db.Spec.Version) {
		return nil, nil, audits
	}
	w := fmt.Sprintf("%s %s -> %s is a major version change: the instances restart one by one on the new version and their data files cannot go back to %s; take a backup first",
		db.Spec.Engine, old.Spec.Version, db.Spec.Version, old.Spec.Version)
	return admission.Warnings{w}, nil, audits
}

func major(version string) string {
	m, _, _ := strings.Cut(version, ".")
	return m
}

// resourcesConsistent: a limit below its request is refused by the API
// server only when the StatefulSet is applied, long after the Database
// was admitted, and the Database then never converges.
func resourcesConsistent(_ context.Context, _, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	var errs field.ErrorList
	path := field.NewPath("spec", "resources", "limits")
	for _, name := range slices.Sorted(maps.Keys(db.Spec.Resources.Limits)) {
		limit := db.Spec.Resources.Limits[name]
		if request, ok := db.Spec.Resources.Requests[name]; ok && limit.Cmp(request) < 0 {
			errs = append(errs, field.Invalid(path.Key(string(name)), limit.String(),
				fmt.Sprintf("below the request %s: raise the limit or lower the request", request.String())))
		}
	}
	return nil, errs, nil
}

// deletionPolicyChange: moving from Retain to Delete removes the protection
// of the data against deleting the Database.
func deletionPolicyChange(_ context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	if old == nil || old.Spec.DeletionPolicy == dbv1.DeletionPolicyDelete || db.Spec.DeletionPolicy != dbv1.DeletionPolicyDelete {
		return nil, nil, nil
	}
	w := "deletionPolicy Delete: deleting this Database now deletes its volumes and all data; set it back to Retain to keep them"
	return admission.Warnings{w}, nil, []Audit{{Reason: ReasonAuditDeletionPolicy,
		Note: fmt.Sprintf("spec.deletionPolicy changed from %s to Delete: deletion protection removed", policyOrDefault(old.Spec.DeletionPolicy))}}
}

func policyOrDefault(p dbv1.DeletionPolicy) dbv1.DeletionPolicy {
	if p == "" {
		return dbv1.DeletionPolicyRetain
	}
	return p
}

// primaryWithinReplicas: spec.primary names an instance that the spec keeps
// (scaling below it would delete the primary's pod). The CRD's rule says
// so too; this one words it for a scale through the scale subresource.
func primaryWithinReplicas(_ context.Context, _, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	if db.Spec.Primary == "" {
		return nil, nil, nil
	}
	ordinal, err := strconv.Atoi(strings.TrimPrefix(db.Spec.Primary, db.Name+"-"))
	if err == nil && strings.HasPrefix(db.Spec.Primary, db.Name+"-") && int32(ordinal) < max(db.Spec.Replicas, 1) {
		return nil, nil, nil
	}
	return nil, field.ErrorList{field.Invalid(field.NewPath("spec", "primary"), db.Spec.Primary,
		fmt.Sprintf("spec.primary must name one of this Database's instances, %s-0 to %s-%d: switch over to a lower instance before scaling below it", db.Name, db.Name, max(db.Spec.Replicas, 1)-1))}, nil
}

// synchronousAvailability warns (the CRD already refuses k >= replicas)
// when synchronous replication waits for every replica: then one replica
// down, restarting or rebuilding stops every write until it is back.
func synchronousAvailability(_ context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	k := db.Spec.SynchronousReplicas()
	if k == 0 || k < db.Spec.Replicas-1 || (old != nil && old.Spec.SynchronousReplicas() == k && old.Spec.Replicas == db.Spec.Replicas) {
		return nil, nil, nil
	}
	return admission.Warnings{fmt.Sprintf("spec.replication: every commit waits for all %d replicas, so the primary takes no write while any replica is down, restarting or being rebuilt; with %d instances and synchronousReplicas %d one replica may be down",
		k, k+2, k)}, nil, nil
}

const maxParameterValue = 1024

// parametersKnown refuses spec.parameters a server would not start with
// (a name it does not know, two spellings of one MySQL/MariaDB option)
// and those the operator owns, each with why.
func parametersKnown(_ context.Context, old, db *dbv1.Database) (admission.Warnings, field.ErrorList, []Audit) {
	if old != nil && maps.Equal(old.Spec.Parameters, db.Spec.Parameters) {
		return nil, nil, nil // what was admitted stays admitted
	}
	var errs field.ErrorList
	engine := string(db.Spec.Engine)
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(db.Spec.Parameters)) {
		path := field.NewPath("spec", "parameters").Key(name)
		// The CRD cannot afford a rule over every value (CEL's cost budget):
		// checked here. A line break would write a setting of its own.
		if v := db.Spec.Parameters[name]; len(v) > maxParameterValue || strings.ContainsFunc(v, unicode.IsControl) {
			errs = append(errs, field.Invalid(path, v, fmt.Sprintf("a value is at most %d characters, on one line, without control characters", maxParameterValue)))
			continue
		}
		if _, err := parameters.Classify(engine, name, db.Spec.Parameters[name]); err != nil {
			errs = append(errs, field.Invalid(path, db.Spec.Parameters[name], err.Error()))
			continue
		}
		n := parameters.Normalize(engine, name)
		if other, ok := seen[n]; ok {
			errs = append(errs, field.Duplicate(path, fmt.Sprintf("%s and %s are one setting (%s)", other, name, n)))
		}
		seen[n] = name
	}
	return nil, errs, nil
}
