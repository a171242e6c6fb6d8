package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/memory"
)

func serveCmd() *cobra.Command {
	var configPath string
	defaults := app.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a Rosetta node (embedded single-node default: data in ./data)",
		Long: `Run a Rosetta node.

Configuration comes from defaults, then the YAML file given by --config, then
ROSETTA_* environment variables, then flags. Every setting has all three
forms: the YAML path storage.durability is the flag --storage.durability and
the variable ROSETTA_STORAGE_DURABILITY.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			overrides := map[string]string{}
			cmd.Flags().Visit(func(f *pflag.Flag) {
				if f.Name != "config" {
					overrides[f.Name] = f.Value.String()
				}
			})
			cfg, err := app.LoadConfig(configPath, os.Environ(), overrides)
			if err != nil {
				return err
			}
			log, err := app.NewLogger(cfg.Log, os.Stderr)
			if err != nil {
				return err
			}
			if os.Getenv("GOGC") == "" {
				// The heap a broker keeps live is small (indexes are
				// mapped files) while every request allocates: collecting
				// less often saves CPU per message.
				debug.SetGCPercent(cfg.GCTarget())
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			switch {
			case os.Getenv("GOMEMLIMIT") != "":
			case cfg.MemoryLimit > 0:
				debug.SetMemoryLimit(int64(cfg.MemoryLimit))
			default:
				tctx, cancel := context.WithCancel(ctx)
				tracked := make(chan struct{})
				go func() {
					defer close(tracked)
					memory.TrackLimit(tctx, log)
				}()
				defer func() { cancel(); <-tracked }()
			}
			a, err := app.New(ctx, cfg, log)
			if err != nil {
				return err
			}
			log.Info("rosetta started", "version", app.Version, "data_dir", cfg.DataDir, "durability", cfg.Storage.Durability)
			err = a.Run(ctx, nil)
			if errors.Is(err, app.ErrRestartToInstall) {
				// A replica fetched a snapshot: the same process starts
				// again and installs it.
				log.Warn("restarting to install a fetched snapshot")
				exe, xerr := os.Executable()
				if xerr == nil {
					xerr = syscall.Exec(exe, os.Args, os.Environ())
				}
				return errors.Join(err, xerr)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file")
	for _, k := range app.Knobs() {
		help := fmt.Sprintf("%s (env %s)", k.Help, k.Env)
		cmd.Flags().String(k.Path, k.Get(&defaults), strings.TrimSpace(help))
		if k.Bool {
			cmd.Flags().Lookup(k.Path).NoOptDefVal = "true" // --cluster.tls alone turns it on
		}
	}
	return cmd
}
