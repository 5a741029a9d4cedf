package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
)

// TestJobOutcome: the one reading of a backup or restore Job's end that
// both reconcilers use.
func TestJobOutcome(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	job := func(cond batchv1.JobConditionType, reason string, ago time.Duration) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-restore"}}
		if cond != "" {
			j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: reason, Message: "pod failed",
				LastTransitionTime: metav1.NewTime(now.Add(-ago))}}
		}
		return j
	}
	pod := func(result *backup.Result) client.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-restore-x", Labels: map[string]string{batchv1.JobNameLabel: "orders-restore"}}}
		cs := corev1.ContainerStatus{Name: componentRestore, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}
		if result != nil {
			cs.State.Terminated.Message = string(result.Encode())
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		return p
	}
	for _, tt := range []struct {
		name       string
		job        *batchv1.Job
		result     *backup.Result
		want       string // running, pending, succeeded, or the failure reason
		wantInText string
	}{
		{"running", job("", "", 0), nil, "running", ""},
		{"succeeded", job(batchv1.JobComplete, "", time.Minute), &backup.Result{Succeeded: true, Size: 42}, "succeeded", ""},
		{"complete, result not written yet", job(batchv1.JobComplete, "", time.Second), nil, "pending", ""},
		{"complete, no result ever", job(batchv1.JobComplete, "", time.Minute), nil, dbv1.ReasonNoResult, "restore Job completed without reporting a result"},
		{"the program failed", job(batchv1.JobFailed, "BackoffLimitExceeded", time.Minute), &backup.Result{Reason: "ChecksumMismatch", Message: "x.sql"}, "ChecksumMismatch", "x.sql"},
		{"deadline", job(batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded, time.Minute), nil, dbv1.ReasonDeadlineExceeded, "restore ran longer than its deadline"},
		{"the Job failed", job(batchv1.JobFailed, "BackoffLimitExceeded", time.Minute), nil, dbv1.ReasonJobFailed, "(BackoffLimitExceeded): pod failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(pod(tt.result)).Build()
			out, err := readJobOutcome(context.Background(), c, tt.job, componentRestore, "restore", now)
			if err != nil {
				t.Fatal(err)
			}
			got := out.reason
			switch {
			case out.running:
				got = "running"
			case out.resultPending:
				got = "pending"
			case out.succeeded():
				got = "succeeded"
			}
			if got != tt.want || !strings.Contains(out.message, tt.wantInText) {
				t.Errorf("outcome %q (%q), want %q (with %q)", got, out.message, tt.want, tt.wantInText)
			}
		})
	}
}
