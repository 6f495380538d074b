package imagebuild

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CACertificatesPath is where Debian, Alpine and Go's crypto/x509 look for the CA bundle.
const CACertificatesPath = "/etc/ssl/certs/ca-certificates.crt"

// UserFiles returns /etc/passwd and /etc/group naming root and one unprivileged user and its
// group (same name, uid == gid), with home directory "/" and no shell. Go's os/user and tools
// that print user names read them; the image's User should still be numeric.
func UserFiles(userName string, uid int) []File {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/:/sbin/nologin\n",
		userName, uid, uid, userName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, uid)
	return []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
	}
}

// CACertificates returns the PEM bundle read from hostPath as the image's
// /etc/ssl/certs/ca-certificates.crt, or an error if hostPath cannot be read or holds no
// certificate.
func CACertificates(hostPath string) (File, error) {
	data, err := os.ReadFile(hostPath)
	if err != nil {
		return File{}, err
	}
	if !strings.Contains(string(data), "-----BEGIN CERTIFICATE-----") {
		return File{}, fmt.Errorf("%s holds no PEM certificate", hostPath)
	}
	return File{Path: CACertificatesPath, Mode: 0o644, Data: data}, nil
}

// SourceDateEpoch returns the time in the SOURCE_DATE_EPOCH environment variable (seconds since
// 1970, see reproducible-builds.org), or the Unix epoch when it is unset.
func SourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", v)
	}
	return time.Unix(sec, 0).UTC(), nil
}
