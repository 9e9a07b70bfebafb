module github.com/vkinfer/vkinfer

go 1.26.0

require (
	github.com/ardanlabs/jinja v1.8.0
	github.com/ollama/ollama v0.17.4
	github.com/openai/openai-go/v3 v3.96.0
	github.com/spf13/pflag v1.0.10
	github.com/vulkan-go/vulkan v0.0.0-20221209234627-c0a353ae26c8
	github.com/x448/float16 v0.8.4
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
