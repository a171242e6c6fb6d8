// Package lint holds tests that keep the code base's shape: imports point
// down the layers (front-ends → broker → storage → model) and nothing else.
package lint
