// Package v1 holds the admission webhooks of the example.com/v1 Database:
// a defaulter (mutating) and a validator, served by the manager's webhook
// server next to the conversion webhook (v1alpha1 <-> v1, registered for
// the hub by the same builder). With matchPolicy Equivalent (the default)
// the API server converts a v1alpha1 request to v1 before calling them, so
// they guard both versions.
//
// Which rule lives where, and why:
//
//   - In the CRD (CEL and OpenAPI schema, api/v1/database_types.go and the
//     same rules on api/v1alpha1): everything that depends only on the
//     object and its previous version. The API server enforces them even
//     when the operator (and so this webhook) is down or not installed:
//     supported versions per engine, engine immutable, storage never
//     shrinks, storage class immutable, no PostgreSQL major change in
//     place, no MariaDB downgrade, version not removable, spec.primary
//     shaped <name>-<ordinal> with ordinal below spec.replicas, name length.
//   - Here (validating): rules that need state CEL cannot see or context it
//     has no access to: whether a failover or switchover is in progress
//     (status as stored, which a spec update does not carry), whether the
//     switchover target exists yet (status.replicas), the requesting user
//     (audit Events), and admission warnings for risky but legal changes
//     (scale-down, major version change, deletion policy Retain -> Delete).
//     A backup target's S3 credentials and CA Secrets must exist with their
//     keys (BackupTargetSecrets: API state). Rules added later plug into
//     DatabaseValidator.Rules.
//   - Here (defaulting): defaults that depend on other fields or on the
//     stored object: the version per engine (on update: the version the
//     Database already runs, never a newer default), resources and the
//     failover policy (the CRD's defaults for it apply only when the
//     failover object is there at all). The controller keeps its own
//     fallback for objects written while the webhook was down. The patch
//     touches only the defaulted fields (sparseDefaulter): a request the
//     schema will refuse reaches it unchanged, for its message.
//   - The same validation runs for the scale subresource (`kubectl scale`,
//     an autoscaling/v1 Scale a webhook on databases never sees), with the
//     Database read as stored.
//
// Audit Events are recorded only for admitted, non-dry-run requests, once
// per change (retries after a write conflict are not recorded again).
package v1
