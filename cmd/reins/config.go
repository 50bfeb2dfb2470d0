package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/trusted"
)

// fileConfig is `reins serve --config FILE`: the trusted tools, their
// credentials, and model prices. A value "env:NAME" is read from the
// service's environment, so secrets need not sit in the file.
//
//	{
//	  "sql":   [{"name": "crm", "url": "sqlite:/srv/crm.db", "allow_writes": false}],
//	  "email": {"addr": "smtp.example.com:587", "from": "agent@example.com",
//	            "username": "agent", "password": "env:SMTP_PASSWORD",
//	            "allowed_recipients": ["*@example.com"]},
//	  "http":  {"allowed_hosts": ["api.example.com"],
//	            "secrets": {"api.example.com": {"Authorization": "env:API_AUTH"}}},
//	  "prices": {"anthropic:claude-sonnet-4-5": {"input": 3, "output": 15}}
//	}
type fileConfig struct {
	SQL []struct {
		Name        string `json:"name"`
		URL         string `json:"url"`
		AllowWrites bool   `json:"allow_writes"`
		MaxRows     int    `json:"max_rows"`
		Tool        string `json:"tool"`
	} `json:"sql"`
	Email *struct {
		Addr              string   `json:"addr"`
		From              string   `json:"from"`
		Username          string   `json:"username"`
		Password          string   `json:"password"`
		AllowedRecipients []string `json:"allowed_recipients"`
	} `json:"email"`
	HTTP *struct {
		AllowedHosts     []string                     `json:"allowed_hosts"`
		MaxResponseBytes int64                        `json:"max_response_bytes"`
		Secrets          map[string]map[string]string `json:"secrets"`
	} `json:"http"`
	Prices agent.Prices `json:"prices"`
}

// loadConfig reads a config file; a missing path means no trusted tools.
func loadConfig(path string) (fileConfig, error) {
	var c fileConfig
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("--config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("--config %s: %w (see `reins serve --help` for the format)", path, err)
	}
	return c, nil
}

// env resolves "env:NAME" values.
func env(v string) (string, error) {
	name, ok := strings.CutPrefix(v, "env:")
	if !ok {
		return v, nil
	}
	val, set := os.LookupEnv(name)
	if !set {
		return "", fmt.Errorf("the config names environment variable %s, which is not set", name)
	}
	return val, nil
}

// trustedTools builds the configured trusted tools; close releases them.
func (c fileConfig) trustedTools() (tools []tool.Tool, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for _, f := range closers {
			f()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	for _, s := range c.SQL {
		url, err := env(s.URL)
		if err != nil {
			return nil, closeAll, err
		}
		t, err := trusted.NewSQL(trusted.SQLConfig{Name: s.Name, URL: url, AllowWrites: s.AllowWrites, MaxRows: s.MaxRows, ToolName: s.Tool})
		if err != nil {
			return nil, closeAll, fmt.Errorf("sql %q: %w", s.Name, err)
		}
		closers = append(closers, func() { t.Close() })
		tools = append(tools, t)
	}
	if e := c.Email; e != nil {
		pw, err := env(e.Password)
		if err != nil {
			return nil, closeAll, err
		}
		t, err := trusted.NewEmail(trusted.EmailConfig{Addr: e.Addr, From: e.From, Username: e.Username, Password: pw, AllowedRecipients: e.AllowedRecipients})
		if err != nil {
			return nil, closeAll, fmt.Errorf("email: %w", err)
		}
		tools = append(tools, t)
	}
	if h := c.HTTP; h != nil {
		secrets := map[string]map[string]string{}
		for host, headers := range h.Secrets {
			secrets[host] = map[string]string{}
			for k, v := range headers {
				if secrets[host][k], err = env(v); err != nil {
					return nil, closeAll, err
				}
			}
		}
		t, err := trusted.NewHTTP(trusted.HTTPConfig{AllowedHosts: h.AllowedHosts, MaxResponseBytes: h.MaxResponseBytes, Secrets: secrets})
		if err != nil {
			return nil, closeAll, fmt.Errorf("http: %w", err)
		}
		closers = append(closers, t.Close)
		tools = append(tools, t)
	}
	return tools, closeAll, nil
}
