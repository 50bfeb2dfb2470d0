package executor

import (
	"crypto/sha256"
	"net"
	"net/http"
	"strings"
)

// Calls for a memory checkpoint of the sandbox (see HostListener), each a
// fresh HTTP/1.1 connection upgraded to nothing: the executor answers
// "101 Switching Protocols" and closes the connection once it has done
// what was asked, so that the caller, reading to the end, knows it is done.
//
//	POST /reins.checkpoint.v1/release HTTP/1.1
//	Authorization: Bearer <token>
//	Connection: Upgrade
//	Upgrade: reins-checkpoint
//
// lets go of the host socket and every connection on it (this one last).
//
//	POST /reins.checkpoint.v1/rekey HTTP/1.1
//	Authorization: Bearer <token>
//	Reins-New-Token: <new token>
//	...
//
// switches the token every later call must present to the new one: a
// sandbox restored from another's checkpoint (a fork) holds that one's
// token in its memory, and the service gives each its own right after the
// restore, before anyone else can reach the socket.
const (
	checkpointPrefix = "/reins.checkpoint.v1/"
	// CheckpointReleasePath is the release call's path.
	CheckpointReleasePath = checkpointPrefix + "release"
	// CheckpointRekeyPath is the rekey call's path.
	CheckpointRekeyPath = checkpointPrefix + "rekey"
	// CheckpointUpgrade is the Upgrade token of both.
	CheckpointUpgrade = "reins-checkpoint"
	// NewTokenHeader carries the new token of a rekey.
	NewTokenHeader = "Reins-New-Token"
	// maxTokenBytes bounds a new token.
	maxTokenBytes = 512
)

// serveCheckpoint answers the calls under checkpointPrefix; the caller is
// authenticated.
func (s *Server) serveCheckpoint(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.ProtoMajor != 1 || !strings.EqualFold(r.Header.Get("Upgrade"), CheckpointUpgrade) {
		portError(w, http.StatusBadRequest, "a checkpoint call is an HTTP/1.1 POST with \"Connection: Upgrade\" and \"Upgrade: "+CheckpointUpgrade+"\"")
		return
	}
	switch r.URL.Path {
	case CheckpointReleasePath:
		s.releaseHost(w)
	case CheckpointRekeyPath:
		tok := strings.TrimSpace(r.Header.Get(NewTokenHeader))
		if tok == "" || len(tok) > maxTokenBytes {
			portError(w, http.StatusBadRequest, "a rekey needs the new token (1 to 512 bytes) in "+NewTokenHeader)
			return
		}
		s.setToken(tok)
		s.log.Info("executor token changed")
		if c, rw, ok := switchProtocols(w, CheckpointUpgrade); ok {
			rw.Flush()
			c.Close()
		}
	default:
		portError(w, http.StatusNotFound, "no such checkpoint call: "+r.URL.Path)
	}
}

// releaseHost lets go of the host socket and its connections, answers,
// and closes the connection it answered on.
func (s *Server) releaseHost(w http.ResponseWriter) {
	h := s.host.Load()
	if h == nil {
		portError(w, http.StatusConflict, errNoHostListener.Error())
		return
	}
	c, rw, ok := switchProtocols(w, CheckpointUpgrade)
	if !ok {
		return
	}
	defer c.Close()
	// The others first, then the answer on this one: when the caller
	// reads the end of it, no host socket is left.
	if h.Release(innerConn(c)) {
		s.log.Info("let go of the host socket for a checkpoint", "relisten_after", RelistenAfter)
	}
	rw.Flush()
}

// innerConn is the connection HostListener accepted beneath the buffering.
func innerConn(c net.Conn) net.Conn {
	if bc, ok := c.(*bufferedConn); ok {
		return bc.Conn
	}
	return c
}

// Relisten listens on the host socket again after a release (see
// HostListener); it does nothing when the socket is not released.
func (s *Server) Relisten() error {
	if h := s.host.Load(); h != nil {
		return h.Relisten()
	}
	return nil
}

func (s *Server) setToken(tok string) {
	sum := sha256.Sum256([]byte(tok))
	s.token.Store(&sum)
}
