// Command apiprobe checks, from inside a pod, that the pod reaches the API server the way
// Shutter's containers do (KUBERNETES_SERVICE_HOST and _PORT, the service account's token and
// CA) and is authenticated as its service account: it asks the API server who it is (a
// SelfSubjectReview, which every authenticated user may create), prints the user name and exits
// 0, or prints the error and exits 1. The local node's test runs it in a hostNetwork pod.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

const secrets = "/var/run/secrets/kubernetes.io/serviceaccount/"

func main() {
	user, err := whoAmI()
	if err != nil {
		fmt.Fprintf(os.Stderr, "apiprobe: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("apiprobe: authenticated as %s\n", user)
}

func whoAmI() (string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return "", fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT unset")
	}
	token, err := os.ReadFile(secrets + "token")
	if err != nil {
		return "", err
	}
	caPEM, err := os.ReadFile(secrets + "ca.crt")
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return "", fmt.Errorf("no certificate in %sca.crt", secrets)
	}
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	url := "https://" + net.JoinHostPort(host, port) + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", url, resp.Status, data)
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
