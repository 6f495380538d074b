// Command apiprobe checks, from inside a pod, that the pod reaches the API server the way
// Shutter's containers do (KUBERNETES_SERVICE_HOST and _PORT, the service account's token and
// CA) and is authenticated as its service account: it asks the API server who it is (a
// SelfSubjectReview, which every authenticated user may create), prints the user name and exits
// 0, or prints the error and exits 1. The local node's test runs it in a hostNetwork pod.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/shutter-csi/shutter/internal/kubehttp"
)

func main() {
	user, err := whoAmI()
	if err != nil {
		fmt.Fprintf(os.Stderr, "apiprobe: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("apiprobe: authenticated as %s\n", user)
}

func whoAmI() (string, error) {
	server, err := kubehttp.InCluster(30 * time.Second)
	if err != nil {
		return "", err
	}
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	data, err := server.Do(context.Background(), http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", body,
		http.StatusCreated, http.StatusOK)
	if err != nil {
		return "", err
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &review); err != nil {
		return "", err
	}
	return review.Status.UserInfo.Username, nil
}
