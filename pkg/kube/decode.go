package kube

import (
	"context"
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/shutter-csi/shutter/client/clientset/versioned/scheme"
)

// skipManagedFields reads past every object's managedFields without decoding them. They are
// about half of a snapshot's or a content's JSON, the API server always sends them, and nothing
// that lists through DecodeList reads them (the informers' transform drops them).
var skipManagedFields = json.WithUnmarshalers(json.UnmarshalFromFunc(func(dec *jsontext.Decoder, _ *[]metav1.ManagedFieldsEntry) error {
	return dec.SkipValue()
}))

// decodeOptions are encoding/json/v2's (the go-json-experiment mirror of it) with the leniency
// of the API machinery's own decoder: names match case-sensitively, as sigs.k8s.io/json does,
// unknown fields are ignored, and neither duplicate names nor invalid UTF-8 fail a list.
var decodeOptions = json.JoinOptions(
	skipManagedFields,
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
)

// DecodeList decodes a list page's JSON into list, every item's managedFields left empty.
//
// It is the start-up list's decoder: at 50,000 snapshots a component's first lists are 100,000
// objects of about 1.6 KB of JSON each. The API machinery's JSON decoder goes through a page
// twice with encoding/json (once for its kind, once for the objects), each time a validating
// scan and then a decoding pass, and decodes every managedFields entry that the transform then
// throws away. encoding/json/v2 goes through it once (BenchmarkDecodeList).
func DecodeList(data []byte, list runtime.Object) error {
	if err := json.Unmarshal(data, list, decodeOptions); err != nil {
		return fmt.Errorf("cannot decode %T: %w", list, err)
	}
	return nil
}

// FastList returns a typed client's List of resource whose pages are read as JSON through
// client, the typed client's RESTClient, and decoded by DecodeList. namespace is "" for all
// namespaces and for cluster-scoped kinds. A fake clientset's typed clients have no REST client:
// with one, FastList returns typed, their own List.
func FastList[L any, PL interface {
	*L
	runtime.Object
}](client rest.Interface, resource, namespace string, typed func(context.Context, metav1.ListOptions) (PL, error)) func(context.Context, metav1.ListOptions) (PL, error) {
	if c, ok := client.(*rest.RESTClient); !ok || c == nil {
		return typed
	}
	return func(ctx context.Context, opts metav1.ListOptions) (PL, error) {
		body, err := client.Get().
			Namespace(namespace).
			Resource(resource).
			VersionedParams(&opts, scheme.ParameterCodec).
			SetHeader("Accept", runtime.ContentTypeJSON).
			Do(ctx).
			Raw()
		if err != nil {
			return nil, err
		}
		list := PL(new(L))
		if err := DecodeList(body, list); err != nil {
			return nil, err
		}
		return list, nil
	}
}
