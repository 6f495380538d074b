package conversion

import (
	"context"
	"fmt"
	"os"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsac "k8s.io/apiextensions-apiserver/pkg/client/applyconfiguration/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/app"
)

// FieldManager owns spec.conversion of the CRDs the webhook points at itself.
const FieldManager = "shutter-conversion-webhook"

// CRDOptions make the webhook point CRDs at itself. Helm never templates a chart's crds/ folder,
// so the chart cannot write spec.conversion; the webhook does, with the CA of its own serving
// certificate, and applies it again every Resync (a CA rotation, or someone applying the CRDs
// again with strategy None, is repaired within one period).
type CRDOptions struct {
	// Names of the CRDs to convert through this webhook; empty leaves every CRD alone.
	Names []string
	// ServiceNamespace, ServiceName and ServicePort name the Service in front of the webhook.
	ServiceNamespace, ServiceName string
	ServicePort                   int32
	// URL, when set, is used instead of a Service (a webhook outside the cluster, or a test).
	URL string
	// CABundleFile holds the PEM CA the API server verifies the webhook's certificate with.
	CABundleFile string
	// Resync is how often the conversion settings are applied again.
	Resync time.Duration
	// Client configures the API connection.
	Client app.ClientOptions
}

// WebhookConversion is the spec.conversion that sends conversions to the webhook at the Service or
// URL in opts, trusting caBundle.
func WebhookConversion(opts CRDOptions, caBundle []byte) *apiextensionsv1.CustomResourceConversion {
	cfg := &apiextensionsv1.WebhookClientConfig{CABundle: caBundle}
	if opts.URL != "" {
		cfg.URL = &opts.URL
	} else {
		path, port := ConvertPath, opts.ServicePort
		cfg.Service = &apiextensionsv1.ServiceReference{
			Namespace: opts.ServiceNamespace, Name: opts.ServiceName, Path: &path, Port: &port,
		}
	}
	return &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig:             cfg,
			ConversionReviewVersions: []string{"v1"},
		},
	}
}

// KeepCRDsPointed applies WebhookConversion to every named CRD now and every Resync until ctx is
// done. Failures are logged and retried on the next period.
func KeepCRDsPointed(ctx context.Context, opts CRDOptions) error {
	cfg, err := opts.Client.Config(FieldManager)
	if err != nil {
		return err
	}
	cs, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := PointCRDs(ctx, cs, opts); err != nil {
			logger.Error(err, "Pointing CRDs at the conversion webhook failed; retrying", "after", opts.Resync)
		}
	}, opts.Resync)
	return nil
}

// PointCRDs applies WebhookConversion, with the CA read from opts.CABundleFile, to every named
// CRD with server-side apply.
func PointCRDs(ctx context.Context, cs apiextensions.Interface, opts CRDOptions) error {
	caBundle, err := os.ReadFile(opts.CABundleFile)
	if err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	if len(caBundle) == 0 {
		return fmt.Errorf("CA bundle %s is empty", opts.CABundleFile)
	}
	conv := WebhookConversion(opts, caBundle)
	cc := conv.Webhook.ClientConfig
	client := apiextensionsac.WebhookClientConfig().WithCABundle(cc.CABundle...)
	if cc.URL != nil {
		client.WithURL(*cc.URL)
	} else {
		client.WithService(apiextensionsac.ServiceReference().WithNamespace(cc.Service.Namespace).
			WithName(cc.Service.Name).WithPath(*cc.Service.Path).WithPort(*cc.Service.Port))
	}
	for _, name := range opts.Names {
		apply := apiextensionsac.CustomResourceDefinition(name).WithSpec(
			apiextensionsac.CustomResourceDefinitionSpec().WithConversion(
				apiextensionsac.CustomResourceConversion().WithStrategy(conv.Strategy).WithWebhook(
					apiextensionsac.WebhookConversion().WithClientConfig(client).
						WithConversionReviewVersions(conv.Webhook.ConversionReviewVersions...))))
		if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Apply(ctx, apply,
			metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return fmt.Errorf("CRD %s: %w", name, err)
		}
	}
	klog.FromContext(ctx).V(2).Info("CRDs convert through the webhook", "crds", opts.Names)
	return nil
}
