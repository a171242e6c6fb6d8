package security

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// keyring holds the node's secret key: it encrypts the signing secrets
// stored in the metadata (AES-256-GCM) and seeds decoy credentials. It lives
// in its own file (mode 0600), apart from the metadata it protects; a
// cluster shares one file among its nodes.
type keyring struct {
	aead  cipher.AEAD
	decoy [32]byte
}

const keyFileSize = 64 // 32 bytes of AES key, 32 of decoy seed

// loadKeyring reads the key file, creating it when missing; path "" makes
// a key for this process only (tests).
func loadKeyring(path string) (*keyring, error) {
	var raw []byte
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			raw = b
		case errors.Is(err, fs.ErrNotExist):
			raw = make([]byte, keyFileSize)
			_, _ = rand.Read(raw)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return nil, fmt.Errorf("key file: %w", err)
			}
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, raw, 0o600); err != nil {
				return nil, fmt.Errorf("key file: %w", err)
			}
			if err := os.Rename(tmp, path); err != nil {
				return nil, fmt.Errorf("key file: %w", err)
			}
		default:
			return nil, fmt.Errorf("key file: %w", err)
		}
	} else {
		raw = make([]byte, keyFileSize)
		_, _ = rand.Read(raw)
	}
	if len(raw) != keyFileSize {
		return nil, fmt.Errorf("key file %s: %d bytes, want %d", path, len(raw), keyFileSize)
	}
	block, err := aes.NewCipher(raw[:32])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	k := &keyring{aead: aead}
	copy(k.decoy[:], raw[32:])
	return k, nil
}

// seal encrypts a secret: nonce followed by ciphertext.
func (k *keyring) seal(plain []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return k.aead.Seal(nonce, nonce, plain, nil), nil
}

// open decrypts what seal made.
func (k *keyring) open(sealed []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("sealed secret too short")
	}
	return k.aead.Open(nil, sealed[:n], sealed[n:], nil)
}
