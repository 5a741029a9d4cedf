package controller

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "example.com/database-operator/api/v1"
)

func newDB(engine dbv1.Engine, mutate ...func(*dbv1.Database)) *dbv1.Database {
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", UID: "uid-1", Generation: 1},
		Spec: dbv1.DatabaseSpec{
			Engine:   engine,
			Replicas: 1,
			Storage:  dbv1.StorageSpec{Size: resource.MustParse("10Gi")},
		},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

func TestChartValues(t *testing.T) {
	defaultRes := map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "256Mi"}}
	base := func(engine, version string) map[string]any {
		port, portName := int64(3306), "mysql"
		if engine == "postgresql" {
			port, portName = 5432, "postgresql"
		}
		return map[string]any{
			"engine": engine, "port": port, "portName": portName, "version": version, "image": "", "replicas": int64(1),
			"storage": map[string]any{"size": "10Gi", "whenScaled": "Retain"}, "resources": defaultRes,
			"credentialsSecret": "orders-credentials", "replicationSecret": "orders-replication",
			"tls": map[string]any{"secretName": "orders-tls", "mountPath": "/etc/database-operator/tls"}, "operatorNamespace": "",
			"networkPolicy": map[string]any{"enabled": true, "jobLabels": map[string]any{"app.kubernetes.io/name": "database-job", "database.example.com/database": "orders"}}, "agentImage": "",
			"agent": map[string]any{"leaseDuration": "15s"}, "terminationGracePeriodSeconds": int64(60), "podManagementPolicy": "OrderedReady",
			"replication": map[string]any{"synchronousReplicas": int64(0), "maxSlotWALKeepSizeMB": int64(2560)},
			"parameters":  map[string]any{}, "restartParameters": map[string]any{},
			"archive": map[string]any{"enabled": false},
		}
	}
	tests := []struct {
		name string
		db   *dbv1.Database
		opts ValueOptions
		want func(map[string]any)
	}{
		{name: "postgresql defaults", db: newDB(dbv1.EnginePostgreSQL), want: func(map[string]any) {}},
		{name: "mysql default version", db: newDB(dbv1.EngineMySQL), want: func(map[string]any) {}},
		{name: "mariadb default version", db: newDB(dbv1.EngineMariaDB), want: func(map[string]any) {}},
		{
			name: "a scale-down keeps the primary's instance until it moved; removed claims follow deletionPolicy",
			db: newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas, db.Status.CurrentPrimary, db.Spec.DeletionPolicy = 1, "orders-2", dbv1.DeletionPolicyDelete
			}),
			opts: ValueOptions{LeaseDuration: 30 * time.Second},
			want: func(m map[string]any) {
				m["replicas"] = int64(3)
				m["storage"] = map[string]any{"size": "10Gi", "whenScaled": "Delete"}
				m["agent"] = map[string]any{"leaseDuration": "30s"}
			},
		},
		{
			name: "a Database made over kept volumes starts its instances in parallel, each kept one until a primary is chosen",
			db: newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
				db.Annotations = map[string]string{keptVolumesAnnotation: "data-orders-0,data-orders-1"}
			}),
			want: func(m map[string]any) { m["podManagementPolicy"], m["replicas"] = "Parallel", int64(2) },
		},
		{
			name: "explicit version, image, replicas, storage class, operator namespace",
			db: newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
				db.Spec.Version, db.Spec.Image, db.Spec.Replicas = "10.11", "mirror/mariadb:10.11.9", 3
				db.Spec.Storage.StorageClassName = ptr.To("fast")
			}),
			opts: ValueOptions{OperatorNamespace: "operators", OperatorImage: "example.com/op:v1"},
			want: func(m map[string]any) {
				m["version"], m["image"], m["replicas"], m["operatorNamespace"] = "10.11", "mirror/mariadb:10.11.9", int64(3), "operators"
				m["agentImage"] = "example.com/op:v1"
				m["storage"] = map[string]any{"size": "10Gi", "storageClassName": "fast", "whenScaled": "Retain"}
			},
		},
		{
			name: "synchronous replication, k defaulted",
			db: newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Replicas, db.Spec.Replication.Mode = 3, dbv1.ReplicationSynchronous
			}),
			want: func(m map[string]any) {
				m["replicas"], m["replication"] = int64(3), map[string]any{"synchronousReplicas": int64(1), "maxSlotWALKeepSizeMB": int64(2560)}
			},
		},
		{
			name: "empty spec.version keeps the version recorded in status",
			db:   newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) { db.Status.Version = "10.11" }),
			want: func(m map[string]any) { m["version"] = "10.11" },
		},
		{
			name: "limits only: requests follow the limits",
			db: newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
			}),
			want: func(m map[string]any) {
				m["resources"] = map[string]any{
					"requests": map[string]any{"memory": "128Mi"},
					"limits":   map[string]any{"memory": "128Mi"},
				}
			},
		},
		{
			name: "quantities are canonical",
			db: newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5")}
				db.Spec.Storage.Size = resource.MustParse("1024Mi")
			}),
			want: func(m map[string]any) {
				m["resources"] = map[string]any{"requests": map[string]any{"cpu": "500m"}}
				m["storage"] = map[string]any{"size": "1Gi", "whenScaled": "Retain"}
				m["replication"] = map[string]any{"synchronousReplicas": int64(0), "maxSlotWALKeepSizeMB": int64(256)}
			},
		},
		{
			name: "parameters by the server's names; those read at start apart; refused ones left out",
			db: newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
				db.Spec.Parameters = map[string]string{"Max-Connections": "300", "innodb_autoinc_lock_mode": "2", "port": "1", "nonsense": "1"}
			}),
			want: func(m map[string]any) {
				m["parameters"] = map[string]any{"max_connections": "300", "innodb_autoinc_lock_mode": "2"}
				m["restartParameters"] = map[string]any{"innodb_autoinc_lock_mode": "2"}
			},
		},
		{
			name: "archiving to the default volume target: the claim mounted, the agent's binary pushes each segment under the Database's UID",
			db: newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
			}),
			want: func(m map[string]any) {
				m["archive"] = map[string]any{
					"enabled": true, "timeoutSeconds": int64(60),
					"command":   "/agent/manager wal-push --dir=/backups --prefix=shop/orders/_wal/uid-1 %p",
					"walStream": []any{"--dir=/backups", "--prefix=shop/orders/_wal/uid-1"},
					"env":       []any{},
					"volumes":   []any{map[string]any{"name": "backups", "persistentVolumeClaim": map[string]any{"claimName": "orders-backups"}}},
					"mounts":    []any{map[string]any{"name": "backups", "mountPath": "/backups"}},
				}
			},
		},
		{
			name: "archiving to S3: credentials from the Secret, the CA mounted, a word with a space quoted for sh",
			db: newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
				db.Spec.Backup = &dbv1.BackupPolicy{
					Archive: &dbv1.ArchivePolicy{Enabled: true, TimeoutSeconds: ptr.To[int32](300)},
					Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "https://s3.test", Bucket: "b", Prefix: "team a",
						CredentialsSecret: dbv1.S3Credentials{Name: "s3-keys"}, CASecret: &dbv1.SecretKeyRef{Name: "s3-ca"}}},
				}
			}),
			want: func(m map[string]any) {
				archive := chartValues(newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) {
					db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true, TimeoutSeconds: ptr.To[int32](300)},
						Target: dbv1.BackupTarget{S3: &dbv1.S3Target{Endpoint: "https://s3.test", Bucket: "b", Prefix: "team a",
							CredentialsSecret: dbv1.S3Credentials{Name: "s3-keys"}, CASecret: &dbv1.SecretKeyRef{Name: "s3-ca"}}}}
				}), ValueOptions{})["archive"].(map[string]any)
				if got, want := archive["command"], "/agent/manager wal-push --s3-endpoint=https://s3.test --s3-bucket=b '--s3-prefix=team a' --s3-ca-file=/etc/database-operator/s3-ca/ca.crt --prefix=shop/orders/_wal/uid-1 %p"; got != want {
					t.Errorf("archive_command %q, want %q", got, want)
				}
				if env := archive["env"].([]any); len(env) != 2 {
					t.Errorf("env %v, want the two S3 keys from s3-keys", env)
				}
				if archive["timeoutSeconds"] != int64(300) || archive["egressPort"] != int64(443) || len(archive["volumes"].([]any)) != 1 || len(archive["mounts"].([]any)) != 1 {
					t.Errorf("archive values %v", archive)
				}
				m["archive"] = archive
			},
		},
		{
			name: "MariaDB archives its binary log through its agent, to the same target",
			db: newDB(dbv1.EngineMariaDB, func(db *dbv1.Database) {
				db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
			}),
			want: func(m map[string]any) {
				m["archive"] = map[string]any{"enabled": true, "timeoutSeconds": int64(60), "env": []any{},
					"binlogArchive": []any{"--dir=/backups", "--prefix=shop/orders/_binlog/uid-1"},
					"volumes":       []any{map[string]any{"name": "backups", "persistentVolumeClaim": map[string]any{"claimName": "orders-backups"}}},
					"mounts":        []any{map[string]any{"name": "backups", "mountPath": "/backups"}}}
			},
		},
		{
			name: "archiving asked of MySQL (the API refuses it) renders nothing",
			db: newDB(dbv1.EngineMySQL, func(db *dbv1.Database) {
				db.Spec.Backup = &dbv1.BackupPolicy{Archive: &dbv1.ArchivePolicy{Enabled: true}}
			}),
			want: func(map[string]any) {},
		},
		{
			name: "a small volume keeps at least 64 MB of WAL for a replica",
			db:   newDB(dbv1.EnginePostgreSQL, func(db *dbv1.Database) { db.Spec.Storage.Size = resource.MustParse("100Mi") }),
			want: func(m map[string]any) {
				m["storage"] = map[string]any{"size": "100Mi", "whenScaled": "Retain"}
				m["replication"] = map[string]any{"synchronousReplicas": int64(0), "maxSlotWALKeepSizeMB": int64(64)}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := base(string(tt.db.Spec.Engine), dbv1.DefaultVersion(tt.db.Spec.Engine))
			tt.want(want)
			got := chartValues(tt.db, tt.opts)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("chartValues:\n got %#v\nwant %#v", got, want)
			}
		})
	}
}
