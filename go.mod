module github.com/reinsdev/reins

go 1.26.0

require connectrpc.com/connect v1.21.1

require google.golang.org/protobuf v1.36.12 // indirect

tool (
	connectrpc.com/connect/cmd/protoc-gen-connect-go
	google.golang.org/protobuf/cmd/protoc-gen-go
)
