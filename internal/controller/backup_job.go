package controller

import (
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/internal/backup"
	"example.com/database-operator/internal/backup/storage"
	"example.com/database-operator/internal/engine"
)

// Backup and restore Jobs run the manager binary's backup and restore
// subcommands inside the database's own image, which has the client tools
// (pg_dump, mariadb-dump...) of the right version: an init container copies
// the static binary from the operator image into a shared emptyDir.
const (
	jobBinDir        = "/opt/database-operator/bin"
	jobBinary        = jobBinDir + "/manager"
	jobBackupsDir    = "/backups"
	jobScratchDir    = "/scratch"
	jobS3CADir       = "/etc/database-operator/s3-ca"
	jobResultFile    = "/dev/termination-log"
	JobAppName       = "database-job" // app.kubernetes.io/name of backup and restore pods
	componentBackup  = "backup"
	componentRestore = "restore"
	defaultDeadline  = int64(3600)
	// defaultBackupClaimSuffix names the claim the operator creates for a volume target without one.
	defaultBackupClaimSuffix = "-backups"
)

// backupTarget is the target a backup of db uses: the Backup's own, else the
// Database's, else the default volume.
func backupTarget(b *dbv1.Backup, db *dbv1.Database) dbv1.BackupTarget {
	switch {
	case b != nil && b.Spec.Target != nil:
		return *b.Spec.Target
	case db.Spec.Backup != nil:
		return db.Spec.Backup.Target
	}
	return dbv1.BackupTarget{}
}

// claimName is the PersistentVolumeClaim of a volume target.
func claimName(t dbv1.BackupTarget, db *dbv1.Database) string {
	if t.Volume != nil && t.Volume.ClaimName != "" {
		return t.Volume.ClaimName
	}
	return db.Name + defaultBackupClaimSuffix
}

// targetPod is what a target adds to a Job's pod: arguments, environment
// and volumes.
type targetPod struct {
	args    []string
	env     []corev1.EnvVar
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
}

func targetForPod(t dbv1.BackupTarget, db *dbv1.Database) targetPod {
	if s3 := t.S3; s3 != nil {
		id, secret := s3.CredentialsSecret.Keys()
		p := targetPod{
			args: []string{"--s3-endpoint=" + s3.Endpoint, "--s3-bucket=" + s3.Bucket},
			env: []corev1.EnvVar{
				secretEnv(storage.EnvAccessKeyID, s3.CredentialsSecret.Name, id),
				secretEnv(storage.EnvSecretAccessKey, s3.CredentialsSecret.Name, secret),
			},
		}
		if s3.Prefix != "" {
			p.args = append(p.args, "--s3-prefix="+s3.Prefix)
		}
		if s3.Region != "" {
			p.args = append(p.args, "--s3-region="+s3.Region)
		}
		if s3.ForcePathStyle {
			p.args = append(p.args, "--s3-path-style")
		}
		if s3.CASecret != nil {
			p.args = append(p.args, "--s3-ca-file="+jobS3CADir+"/ca.crt")
			p.volumes = append(p.volumes, corev1.Volume{Name: "s3-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: s3.CASecret.Name, Items: []corev1.KeyToPath{{Key: s3.CASecret.KeyOrDefault(), Path: "ca.crt"}}}}})
			p.mounts = append(p.mounts, corev1.VolumeMount{Name: "s3-ca", MountPath: jobS3CADir, ReadOnly: true})
		}
		return p
	}
	return targetPod{
		args:    []string{"--dir=" + jobBackupsDir},
		volumes: []corev1.Volume{{Name: "backups", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(t, db)}}}},
		mounts:  []corev1.VolumeMount{{Name: "backups", MountPath: jobBackupsDir}},
	}
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

// jobRequest is one backup or restore Job.
type jobRequest struct {
	name      string
	component string // backup or restore
	db        *dbv1.Database
	instance  *corev1.Pod // the pod whose server the Job talks to (and whose image it runs)
	target    dbv1.BackupTarget
	args      []string // the subcommand's own arguments
	env       []corev1.EnvVar
	deadline  int64
	labels    map[string]string
}

// buildJob renders a backup or restore Job. It fails only when the
// operator's own image is unknown (it carries the program).
func buildJob(req jobRequest, operatorImage string) (*batchv1.Job, error) {
	if operatorImage == "" {
		return nil, fmt.Errorf("the operator's image is unknown (set RELATED_IMAGE_MANAGER on the operator): backup and restore Jobs run its binary")
	}
	db := req.db
	container := databaseContainer(req.instance)
	if container == nil {
		return nil, fmt.Errorf("pod %s has no database container", req.instance.Name)
	}
	tp := targetForPod(req.target, db)
	host := fmt.Sprintf("%s.%s-headless.%s.svc", req.instance.Name, db.Name, db.Namespace)
	args := append([]string{req.component,
		"--engine=" + string(db.Spec.Engine), "--host=" + host, "--port=" + strconv.Itoa(int(engine.ProfileOf(db.Spec.Engine).Port)),
		"--user=" + engine.ProfileOf(db.Spec.Engine).Superuser, "--result-file=" + jobResultFile}, tp.args...)
	args = append(args, req.args...)

	labels := map[string]string{
		labelName: JobAppName, labelInstance: db.Name, labelManagedBy: managedBy,
		labelComponent: req.component, labelDatabase: db.Name,
	}
	for k, v := range req.labels {
		labels[k] = v
	}
	env := append(append([]corev1.EnvVar{secretEnv(backup.EnvPassword, credentialsSecretName(db), corev1.BasicAuthPasswordKey)}, req.env...), tp.env...)
	// The root filesystem is read-only: the client tools get /tmp.
	mounts := append([]corev1.VolumeMount{{Name: "bin", MountPath: jobBinDir, ReadOnly: true}, {Name: "tmp", MountPath: "/tmp"}}, tp.mounts...)
	volumes := append([]corev1.Volume{
		{Name: "bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}, tp.volumes...)
	if podServerName(db, req.instance) != "" {
		// The server takes TLS only: the Job verifies it with the CA
		// bundle (and nothing else of the certificate Secret: no key).
		args = append(args, "--ca-file="+peerCAFile)
		mounts = append(mounts, corev1.VolumeMount{Name: "tls", MountPath: tlsMountPath, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: tlsSecretName(db), Items: []corev1.KeyToPath{{Key: keyCACert, Path: keyCACert}}, DefaultMode: ptr.To(int32(0o444))}}})
	}
	if req.component == componentRestore {
		args = append(args, "--scratch="+jobScratchDir)
		mounts = append(mounts, corev1.VolumeMount{Name: "scratch", MountPath: jobScratchDir})
		volumes = append(volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	restricted, resources := jobSecurityContext(), jobResources()

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: req.name, Namespace: db.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			// One attempt: a failed backup is reported, not retried behind
			// the user's back (the next scheduled one is the retry).
			BackoffLimit:          ptr.To(int32(0)),
			ActiveDeadlineSeconds: ptr.To(req.deadline),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext:              req.instance.Spec.SecurityContext.DeepCopy(),
					ImagePullSecrets:             req.instance.Spec.ImagePullSecrets,
					InitContainers: []corev1.Container{{
						Name: "operator-binary", Image: operatorImage, Command: []string{"/manager", "copy-binary", jobBinary},
						VolumeMounts:    []corev1.VolumeMount{{Name: "bin", MountPath: jobBinDir}},
						SecurityContext: restricted, Resources: resources,
					}},
					Containers: []corev1.Container{{
						Name: req.component, Image: container.Image, Command: []string{jobBinary}, Args: args,
						Env: env, VolumeMounts: mounts, SecurityContext: restricted, Resources: resources,
						TerminationMessagePath: jobResultFile, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					}},
					Volumes: volumes,
				},
			},
		},
	}
	return job, nil
}

// jobSecurityContext is every Job container's: restricted, read-only root.
func jobSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func jobResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}
}

// databaseContainerName is the chart's server container (the agent's).
const databaseContainerName = "database"

func databaseContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == databaseContainerName {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}
