package conversion

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
)

// DefaultMaxRequestBytes bounds a ConversionReview body unless configured otherwise; the API
// server sends at most one list page.
const DefaultMaxRequestBytes = 64 << 20

// Review answers one ConversionReview request: every object converted, or a failure naming the
// first object that could not be.
func Review(req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID}
	converted := make([]runtime.RawExtension, 0, len(req.Objects))
	for i, raw := range req.Objects {
		out, err := convertRaw(raw.Raw, req.DesiredAPIVersion)
		if err != nil {
			resp.Result = metav1.Status{
				Status:  metav1.StatusFailure,
				Message: fmt.Sprintf("object %d: %v", i, err),
			}
			return resp
		}
		converted = append(converted, runtime.RawExtension{Raw: out})
	}
	resp.ConvertedObjects = converted
	resp.Result = metav1.Status{Status: metav1.StatusSuccess}
	return resp
}

func convertRaw(raw []byte, desiredAPIVersion string) ([]byte, error) {
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	out, err := Convert(obj, desiredAPIVersion)
	if err != nil {
		return nil, err
	}
	return out.MarshalJSON()
}

// Handler serves ConversionReviews of apiextensions.k8s.io/v1 posted as JSON, of at most
// DefaultMaxRequestBytes.
func Handler() http.Handler { return LimitedHandler(DefaultMaxRequestBytes) }

// tooLarge answers a body over limit with 413.
func tooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	klog.FromContext(r.Context()).Error(nil, "ConversionReview too large", "limitBytes", limit, "contentLength", r.ContentLength)
	http.Error(w, fmt.Sprintf("ConversionReview body exceeds the limit of %d bytes (--max-request-bytes)", limit),
		http.StatusRequestEntityTooLarge)
}

// LimitedHandler is Handler for bodies of at most maxBytes; a longer body is refused with 413
// Request Entity Too Large, never cut and parsed.
func LimitedHandler(maxBytes int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		if r.Method != http.MethodPost {
			http.Error(w, "only POST is served", http.StatusMethodNotAllowed)
			return
		}
		if r.ContentLength > maxBytes { // refused before a byte of it is read
			tooLarge(w, r, maxBytes)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			tooLarge(w, r, maxErr.Limit)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		review := &apiextensionsv1.ConversionReview{}
		if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not a ConversionReview: %v", err), http.StatusBadRequest)
			return
		}
		if review.APIVersion != apiextensionsv1.SchemeGroupVersion.String() {
			http.Error(w, "only apiextensions.k8s.io/v1 ConversionReviews are served", http.StatusBadRequest)
			return
		}
		resp := Review(review.Request)
		logger.V(4).Info("Converted objects", "uid", review.Request.UID, "desiredAPIVersion",
			review.Request.DesiredAPIVersion, "objects", len(review.Request.Objects), "result", resp.Result.Status)
		if resp.Result.Status != metav1.StatusSuccess {
			logger.Error(nil, "Conversion failed", "uid", review.Request.UID, "message", resp.Result.Message)
		}
		review.Request, review.Response = nil, resp
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(review); err != nil {
			logger.Error(err, "Writing the ConversionReview response failed")
		}
	})
}
