package v1

// CredentialsSecretName is the Secret the operator keeps a Database's
// superuser account in. Whoever may read it may read all the data, which is
// why naming a backup target needs it too (see the validating webhooks).
func CredentialsSecretName(database string) string { return database + "-credentials" }
