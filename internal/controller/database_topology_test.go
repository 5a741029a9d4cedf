package controller

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// instancePod is an instance pod of the Database "orders", mounting its
// certificate or not.
func instancePod(name string, tls bool) corev1.Pod {
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Hostname: name, Subdomain: "orders-headless"}}
	if tls {
		pod.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "orders-tls"}}}}
	}
	return pod
}

func TestDesiredTopology(t *testing.T) {
	for _, tc := range []struct {
		name    string
		current string // status.currentPrimary
		obs     observed
		live    map[string]string
		want    map[string]string
	}{
		{name: "new database: instance 0", want: map[string]string{"primary": "orders-0"}},
		{name: "status names the primary; it has served", current: "orders-2", live: map[string]string{"primary": "orders-0"},
			want: map[string]string{"primary": "orders-2", "initialized": "true"}},
		{name: "a promotion in this reconcile wins", current: "orders-0", obs: observed{promoted: "orders-1"},
			want: map[string]string{"primary": "orders-1", "initialized": "true"}},
		{name: "rewind requests are kept and added", current: "orders-1",
			obs:  observed{rewind: map[string]string{"orders-0": "t5"}},
			live: map[string]string{"primary": "orders-1", "rewind-orders-2": "t4"},
			want: map[string]string{"primary": "orders-1", "initialized": "true", "rewind-orders-2": "t4", "rewind-orders-0": "t5"}},
		{name: "rebuild requests are kept and added; stray keys dropped", current: "orders-1",
			obs:  observed{rebuild: map[string]string{"orders-2": "t2"}},
			live: map[string]string{"primary": "orders-1", "rebuild-orders-0": "t1", "edited-by-hand": "x"},
			want: map[string]string{"primary": "orders-1", "initialized": "true", "rebuild-orders-0": "t1", "rebuild-orders-2": "t2"}},
		{name: "a newer request replaces the old token", current: "orders-1",
			obs:  observed{rebuild: map[string]string{"orders-0": "t3"}},
			live: map[string]string{"primary": "orders-1", "rebuild-orders-0": "t1"},
			want: map[string]string{"primary": "orders-1", "initialized": "true", "rebuild-orders-0": "t3"}},
		{name: "a pod started before the certificate serves plain text: marked, so its replicas reach it without TLS", current: "orders-0",
			obs:  observed{pods: []corev1.Pod{instancePod("orders-0", false), instancePod("orders-1", true)}},
			want: map[string]string{"primary": "orders-0", "initialized": "true", "plain-orders-0": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) { db.Status.CurrentPrimary = tc.current })
			if got := desiredTopology(db, &tc.obs, tc.live); !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
