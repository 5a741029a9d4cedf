package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	dbv1 "example.com/database-operator/api/v1"
	"example.com/database-operator/pkg/client/clientset/versioned"
)

// Clients are the clients a command uses, for the namespace it acts in.
type Clients struct {
	Config    *rest.Config
	Namespace string
	DB        versioned.Interface
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
}

// Clients builds the clients from kubectl's flags once.
func (o *Options) Clients() (*Clients, error) {
	if o.clients != nil {
		return o.clients, nil
	}
	if err := o.haveConfig(); err != nil {
		return nil, err
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ns, _, err := o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("the namespace: %w", err)
	}
	c := &Clients{Config: cfg, Namespace: ns}
	if c.DB, err = versioned.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	o.clients = c
	return c, nil
}

// haveConfig fails clearly when there is nothing to connect with: no
// kubeconfig context, no --server, not in a pod (client-go would try
// localhost:8080 and say the connection was refused).
func (o *Options) haveConfig() error {
	raw, err := o.ConfigFlags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	server := o.ConfigFlags.APIServer != nil && *o.ConfigFlags.APIServer != ""
	if len(raw.Contexts) == 0 && !server && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return errors.New("no kubeconfig: give --kubeconfig, set KUBECONFIG, or write ~/.kube/config")
	}
	return nil
}

// database reads a Database, saying clearly when there is none.
func (c *Clients) database(ctx context.Context, name string) (*dbv1.Database, error) {
	db, err := c.DB.ExampleV1().Databases(c.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("no Database %q in namespace %q", name, c.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Database %s/%s: %w", c.Namespace, name, err)
	}
	return db, nil
}

// completeDatabases completes a Database name in the namespace of the flags.
func (o *Options) completeDatabases(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := o.Clients()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	list, err := c.DB.ExampleV1().Databases(c.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	names := make([]string, 0, len(list.Items))
	for _, db := range list.Items {
		names = append(names, db.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
