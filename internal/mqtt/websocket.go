package mqtt

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// MQTT over WebSocket (what browsers speak): the HTTP port's /mqtt
// upgrades to a WebSocket of subprotocol "mqtt" (or 3.1's "mqttv3.1"),
// whose binary messages carry the packet stream.

// WebSocketHandler serves MQTT over WebSocket until ctx of Serve ends.
func (s *Server) WebSocketHandler() http.Handler {
	up := websocket.Upgrader{Subprotocols: []string{"mqtt", "mqttv3.1"}, ReadBufferSize: 1024, WriteBufferSize: 1024,
		CheckOrigin: func(*http.Request) bool { return true }} // (browsers' pages come from anywhere; credentials are MQTT's)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			http.Error(w, "MQTT over WebSocket: upgrade with subprotocol mqtt", http.StatusBadRequest)
			return
		}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			s.log.Info("mqtt websocket upgrade failed", "remote", r.RemoteAddr, "err", err)
			return
		}
		s.serveConn(&wsConn{ws: ws})
	})
}

// serveConn serves one connection accepted elsewhere (it may return
// before the connection ends).
func (s *Server) serveConn(nc net.Conn) {
	ctx := s.life
	if ctx.Err() != nil {
		_ = nc.Close()
		return
	}
	s.wg.Add(1)
	newConn(ctx, s, nc).serve(s.wg.Done)
}

// wsConn is a WebSocket as the byte stream a net.Conn is.
type wsConn struct {
	ws *websocket.Conn
	r  io.Reader // the current message's rest
	wm sync.Mutex
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				return 0, errors.New("mqtt over websocket: a text message")
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.wm.Lock()
	defer c.wm.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error         { return c.ws.Close() }
func (c *wsConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error {
	return errors.Join(c.ws.SetReadDeadline(t), c.ws.SetWriteDeadline(t))
}
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
