package v1

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dbv1 "example.com/database-operator/api/v1"
)

// The markers generate config/webhook/manifests.yaml. failurePolicy Fail:
// a Database admitted without its rules could lose data. sideEffects
// NoneOnDryRun: the validator records audit Events, never on a dry run.
// +kubebuilder:webhook:path=/mutate-example-com-v1-database,mutating=true,failurePolicy=fail,sideEffects=None,groups=example.com,resources=databases,verbs=create;update,versions=v1,name=mdatabase-v1.example.com,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-example-com-v1-database,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=example.com,resources=databases,verbs=create;update,versions=v1,name=vdatabase-v1.example.com,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-example-com-v1-backup,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=example.com,resources=backups,verbs=create;update,versions=v1,name=vbackup-v1.example.com,admissionReviewVersions=v1,timeoutSeconds=10

// The webhooks ask the API server whether the requesting user may read the
// Secrets a backup target names.
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Options are the operator-wide settings of the webhooks.
type Options struct {
	// AllowedImagePrefixes bound spec.image (empty: any image; every
	// change is audited either way).
	AllowedImagePrefixes []string
}

// Setup registers the defaulting, validating and conversion webhooks of the
// Database and the validating webhook of the Backup with the manager's
// webhook server. extra rules run after the built-in ones (the extension
// point for rules on fields other changes add).
func Setup(mgr ctrl.Manager, o Options, extra ...Rule) error {
	if err := CheckImagePrefixes(o.AllowedImagePrefixes); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("database-operator-webhook")
	v := &DatabaseValidator{
		Recorder: recorder,
		// BackupTargetSecrets reads Secrets straight from the API server:
		// the operator's cache holds only its own.
		Rules: append(append(DefaultRules(), BackupTargetSecrets(mgr.GetAPIReader(), mgr.GetClient()), ImagePolicy(o.AllowedImagePrefixes)), extra...),
	}
	// The builder serves the validator and /convert (the scheme holds
	// v1alpha1 as a spoke of the v1 hub). The defaulter is served with a
	// sparse patch (see sparseDefaulter) rather than WithDefaulter.
	if err := ctrl.NewWebhookManagedBy(mgr, &dbv1.Database{}).WithValidator(v).Complete(); err != nil {
		return fmt.Errorf("setting up the Database webhooks: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &dbv1.Backup{}).WithValidator(&BackupValidator{Client: mgr.GetClient(), Recorder: recorder}).Complete(); err != nil {
		return fmt.Errorf("setting up the Backup webhook: %w", err)
	}
	mgr.GetWebhookServer().Register(MutatePath, &admission.Webhook{Handler: &sparseDefaulter{defaulter: &DatabaseDefaulter{}}})
	mgr.GetWebhookServer().Register(ScalePath, &admission.Webhook{Handler: &scaleValidator{reader: mgr.GetAPIReader(), validator: v}})
	return nil
}
