package plugin

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
)

// passwordMask stands for the password in what --print shows.
const passwordMask = "****"

// connectInfo is what --print shows: how to connect without the plugin.
type connectInfo struct {
	Database, Namespace string
	Client              engineClient
	Creds               credentials
	// Pod is the instance to port-forward to; Replica says it is a
	// replica, and the connection string names the read-only Service.
	Pod     string
	Replica bool
	// ShowPassword puts the password in the connection string.
	ShowPassword bool
	// Kubectl are kubectl's flags the plugin was given that the printed
	// kubectl commands need too (--context, --kubeconfig), with -n.
	Kubectl []string
}

// connectionURI is scheme://user:password@host:port/database, the
// password masked unless show.
func connectionURI(scheme string, cr credentials, show bool) string {
	user := url.User(cr.User).String()
	if show {
		user = url.UserPassword(cr.User, cr.Password).String()
	} else {
		user += ":" + passwordMask
	}
	path := (&url.URL{Path: "/" + cr.Database}).EscapedPath()
	return scheme + "://" + user + "@" + net.JoinHostPort(cr.Host, cr.Port) + path
}

// write prints in to w.
func (in connectInfo) write(w io.Writer) error {
	cr := in.Creds
	if in.Replica {
		cr.Host = in.Database + readOnlyService + "." + in.Namespace + ".svc"
	}
	flags := strings.Join(in.Kubectl, " ")
	port := int(in.Client.Port)
	client := append([]string{in.Client.Programs[0]}, in.Client.printedArgs(forwardLocalAddress, port, cr.User, cr.Database)...)
	lines := [][2]string{
		{"In the cluster:", connectionURI(in.Client.Scheme, cr, in.ShowPassword)},
		{"Password:", fmt.Sprintf("kubectl get secret %s %s -o jsonpath='{.data.password}' | base64 -d", in.Database+appSecretSuffix, flags)},
		{"From here:", fmt.Sprintf("kubectl port-forward %s pod/%s %d:%d", flags, in.Pod, port, port)},
		{"and meanwhile:", fmt.Sprintf("%s   (the password at its prompt, or in %s)", strings.Join(client, " "), in.Client.PasswordEnv)},
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-15s %s\n", l[0], l[1])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// kubectlFlags are -n ns and the --context and --kubeconfig the plugin
// was given, shell-quoted, for the kubectl commands --print shows.
func (o *Options) kubectlFlags(ns string) []string {
	flags := []string{"-n", shellQuote(ns)}
	if o.ConfigFlags == nil {
		return flags
	}
	for _, f := range []struct {
		name  string
		value *string
	}{{"--context", o.ConfigFlags.Context}, {"--kubeconfig", o.ConfigFlags.KubeConfig}} {
		if f.value != nil && *f.value != "" {
			flags = append(flags, f.name, shellQuote(*f.value))
		}
	}
	return flags
}

// shellQuote is s as a POSIX shell word.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,/:@=+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
