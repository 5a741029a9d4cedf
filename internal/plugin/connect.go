package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "example.com/database-operator/api/v1"
)

// connectOptions are connect's flags.
type connectOptions struct {
	replica, print, showPassword bool
}

func newConnectCommand(o *Options) *cobra.Command {
	var co connectOptions
	cmd := &cobra.Command{
		Use:   "connect NAME [--replica] [--print [--show-password]] [-- CLIENT ARGS...]",
		Short: "Open the engine's client (psql, mariadb, mysql) on a Database as its application account",
		Long: `Open the engine's command-line client on the Database NAME, as the application
account of its Secret NAME-app, through a port-forward from 127.0.0.1 to the
primary's pod (with --replica, a ready replica's). The client is psql for
PostgreSQL, mysql for MySQL, mariadb (or mysql) for MariaDB, and must be on
PATH. The password goes to it in its environment (PGPASSWORD, MYSQL_PWD),
never on its command line. Arguments after -- go to the client; the plugin
ends with the client's exit code.

--print shows instead how to connect: the in-cluster connection string (the
password masked unless --show-password), how to read the password, and the
port-forward and client commands.

--timeout bounds finding the instance and opening the port-forward, not the
session.`,
		Example: `  kubectl database connect orders
  kubectl database connect orders --replica
  kubectl database connect orders -- -c 'SELECT 1'
  kubectl database connect orders --print`,
		Args: func(cmd *cobra.Command, a []string) error {
			if n := cmd.ArgsLenAtDash(); n >= 0 {
				a = a[:n]
			}
			return args(1, "the Database's NAME")(cmd, a)
		},
		ValidArgsFunction: o.completeDatabases,
		RunE: func(cmd *cobra.Command, a []string) error {
			var extra []string
			if n := cmd.ArgsLenAtDash(); n >= 0 {
				extra = a[n:]
			}
			if co.showPassword && !co.print {
				return usageError{errors.New("--show-password goes with --print")}
			}
			if co.print && len(extra) > 0 {
				return usageError{errors.New("the arguments after -- go to the client, which --print does not run")}
			}
			return o.connect(cmd, co, a[0], extra)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&co.replica, "replica", false, "connect to a ready replica (read-only) instead of the primary")
	f.BoolVar(&co.print, "print", false, "print how to connect instead of connecting (reads the Database and its Secret only)")
	f.BoolVar(&co.showPassword, "show-password", false, "with --print, put the password in the connection string")
	return cmd
}

// connect is connect's work: the Database, its pod and Secret, then
// --print's lines or the client through a port-forward.
func (o *Options) connect(cmd *cobra.Command, co connectOptions, name string, extra []string) error {
	c, err := o.Clients()
	if err != nil {
		return err
	}
	ctx, cancel := o.context(cmd)
	defer cancel()
	db, err := c.database(ctx, name)
	if err != nil {
		return err
	}
	pod, err := c.targetPod(ctx, db, co.replica)
	if err != nil {
		return err
	}
	cr, err := c.appCredentials(ctx, db)
	if err != nil {
		return err
	}
	ec := engineClientOf(db.Spec.Engine)
	if co.print {
		return connectInfo{
			Database: db.Name, Namespace: c.Namespace, Client: ec, Creds: cr, Pod: pod, Replica: co.replica,
			ShowPassword: co.showPassword, Kubectl: o.kubectlFlags(c.Namespace),
		}.write(o.Out)
	}
	return o.connectClient(ctx, c, db, ec, pod, cr, extra)
}

// connectClient forwards a local port to pod's server and runs the client
// on it until it exits, then stops the port-forward.
func (o *Options) connectClient(ctx context.Context, c *Clients, db *dbv1.Database, ec engineClient, pod string, cr credentials, extra []string) error {
	path, program, err := ec.lookPath()
	if err != nil {
		return err
	}
	p, err := c.Kube.CoreV1().Pods(c.Namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading pod %s of Database %s: %w", pod, db.Name, err)
	}
	fw, err := c.forward(ctx, pod, serverPort(p, ec), o.ErrOut)
	if err != nil {
		return err
	}
	runErr := runClient(clientCommand(ec, path, os.Environ(), forwardLocalAddress, int(fw.Local), cr, extra), program, o.In, o.Out, o.ErrOut)
	if fwErr := fw.Stop(); fwErr != nil {
		fmt.Fprintf(o.ErrOut, "port-forward to pod %s: %v\n", pod, fwErr)
	}
	return runErr
}
