module github.com/shutter-csi/shutter

go 1.26.0

replace github.com/shutter-csi/shutter/client => ./client
