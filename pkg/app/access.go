package app

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Rule is one permission a feature needs: verb on resource (in API group Group; "" is the core
// group), in every namespace when Namespace is empty.
type Rule struct {
	Verb, Group, Resource, Subresource, Namespace string
}

// String names the rule as an RBAC rule would grant it.
func (r Rule) String() string {
	res := r.Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	where := "at cluster scope (a ClusterRole)"
	if r.Namespace != "" {
		where = "in namespace " + r.Namespace
	}
	return fmt.Sprintf("%s %s (apiGroups [%q]) %s", r.Verb, res, r.Group, where)
}

// Missing returns the rules this component's identity is not granted, asking the API server
// with one SelfSubjectAccessReview per rule (which every authenticated identity may create).
func Missing(ctx context.Context, kube kubernetes.Interface, rules ...Rule) ([]Rule, error) {
	var missing []Rule
	for _, r := range rules {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: r.Verb, Group: r.Group, Resource: r.Resource,
				Subresource: r.Subresource, Namespace: r.Namespace},
		}}
		got, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("access review of %s: %w", r, err)
		}
		if !got.Status.Allowed {
			missing = append(missing, r)
		}
	}
	return missing, nil
}

// Permitted tells whether every rule of a feature is granted. When some are not it logs one
// warning naming the feature and the missing rules and returns false. An error of the review
// itself is logged and counts as permitted: the feature then reports its own errors.
func Permitted(ctx context.Context, kube kubernetes.Interface, feature string, rules ...Rule) bool {
	missing, err := Missing(ctx, kube, rules...)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot check permissions; keeping the feature on", "feature", feature)
		return true
	}
	if len(missing) == 0 {
		return true
	}
	names := make([]string, len(missing))
	for i, r := range missing {
		names[i] = r.String()
	}
	klog.Warningf("%s is turned off: this component's RBAC role lacks %v; grant it to turn the feature on", feature, names)
	return false
}
