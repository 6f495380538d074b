package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// Chart describes one installation of Shutter's Helm chart.
type Chart struct {
	// Helm is the helm binary; Dir is the chart folder.
	Helm, Dir string
	// Release and Namespace name the release; the ServiceAccounts follow from them.
	Release, Namespace string
	// Set holds extra --set arguments.
	Set []string
}

// ControllerServiceAccount is the snapshot-controller's ServiceAccount the chart creates.
func (c Chart) ControllerServiceAccount() string { return c.fullname() + "-snapshot-controller" }

// HostpathServiceAccount is the hostpath driver pod's ServiceAccount the chart creates.
func (c Chart) HostpathServiceAccount() string { return c.fullname() + "-hostpath" }

// fullname mirrors the chart's "shutter.fullname" helper.
func (c Chart) fullname() string {
	if strings.Contains(c.Release, "shutter") {
		return c.Release
	}
	return c.Release + "-shutter"
}

// Install runs `helm upgrade --install` of the chart into the cluster of kubeconfig. It does not
// wait for pods: without a kubelet they stay Pending.
func (c Chart) Install(ctx context.Context, kubeconfig string) error {
	args := []string{"upgrade", "--install", c.Release, c.Dir, "--kubeconfig", kubeconfig,
		"--namespace", c.Namespace, "--create-namespace"}
	for _, s := range c.Set {
		args = append(args, "--set", s)
	}
	return c.helm(ctx, args...)
}

// Uninstall removes the release (the CRDs stay, as Helm leaves them).
func (c Chart) Uninstall(ctx context.Context, kubeconfig string) error {
	return c.helm(ctx, "uninstall", c.Release, "--kubeconfig", kubeconfig, "--namespace", c.Namespace, "--wait")
}

func (c Chart) helm(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, c.Helm, args...)
	// Keep helm's caches out of the user's home.
	tmp := os.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(tmp, "shutter-helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(tmp, "shutter-helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(tmp, "shutter-helm", "data"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm %s: %w\n%s", args[0], err, out)
	}
	return nil
}

// TokenKubeconfig asks the API server for a token of the ServiceAccount namespace/name
// (TokenRequest) and writes a kubeconfig at path that authenticates with it, so that whatever
// uses the kubeconfig has exactly the ServiceAccount's permissions.
func TokenKubeconfig(ctx context.Context, admin *rest.Config, namespace, name, path string) error {
	return TokenKubeconfigAt(ctx, admin, namespace, name, path, admin.Host)
}

// TokenKubeconfigAt is TokenKubeconfig with another server address, e.g. a proxy in front of
// the API server that presents the API server's certificate.
func TokenKubeconfigAt(ctx context.Context, admin *rest.Config, namespace, name, path, server string) error {
	kube, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](6 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	cluster := &clientcmdapi.Cluster{Server: server, CertificateAuthority: admin.CAFile,
		CertificateAuthorityData: admin.CAData}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["shutter"] = cluster
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["shutter"] = &clientcmdapi.Context{Cluster: "shutter", AuthInfo: name, Namespace: namespace}
	cfg.CurrentContext = "shutter"
	return clientcmd.WriteToFile(*cfg, path)
}
