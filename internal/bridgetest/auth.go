package bridgetest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// Operator is a decentralized-auth (JWT) setup made for one test: an
// operator, its system account, an account APP with JetStream enabled and
// a user of APP. Configure turns a server into operator mode trusting it.
type Operator struct {
	claims         *jwt.OperatorClaims
	sysPub, sysJWT string
	accPub, accJWT string
	// Creds is the user's credentials file content (JWT and seed), as
	// `nsc` writes it.
	Creds []byte
	// UserSeed is the user's nkey seed (SU…), the secret in Creds.
	UserSeed string
}

// NewOperator creates the operator, accounts and user.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	okp, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opub, err := okp.PublicKey()
	require.NoError(t, err)

	account := func(name string, js bool) (string, string, nkeys.KeyPair) {
		kp, err := nkeys.CreateAccount()
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{
				MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit,
			}
		}
		token, err := ac.Encode(okp)
		require.NoError(t, err)
		return pub, token, kp
	}
	o := &Operator{}
	o.sysPub, o.sysJWT, _ = account("SYS", false)
	var akp nkeys.KeyPair
	o.accPub, o.accJWT, akp = account("APP", true)

	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "bridge-test"
	oc.SystemAccount = o.sysPub
	opJWT, err := oc.Encode(okp)
	require.NoError(t, err)
	o.claims, err = jwt.DecodeOperatorClaims(opJWT)
	require.NoError(t, err)

	ukp, err := nkeys.CreateUser()
	require.NoError(t, err)
	upub, err := ukp.PublicKey()
	require.NoError(t, err)
	useed, err := ukp.Seed()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(upub)
	uc.Name = "bridge"
	userJWT, err := uc.Encode(akp)
	require.NoError(t, err)
	o.Creds, err = jwt.FormatUserConfig(userJWT, useed)
	require.NoError(t, err)
	o.UserSeed = string(useed)
	return o
}

// Configure puts a server in operator mode: it trusts the operator, and a
// memory resolver holds the system account and APP.
func (o *Operator) Configure(opts *server.Options) {
	r := &server.MemAccResolver{}
	_ = r.Store(o.sysPub, o.sysJWT)
	_ = r.Store(o.accPub, o.accJWT)
	opts.TrustedOperators = []*jwt.OperatorClaims{o.claims}
	opts.AccountResolver = r
	opts.SystemAccount = o.sysPub
}

// WriteCreds writes Creds to user.creds in a temp dir and returns its path.
func (o *Operator) WriteCreds(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "user.creds")
	require.NoError(t, os.WriteFile(path, o.Creds, 0o600))
	return path
}

// NkeyUser is an nkey user of a server without accounts (server.Options
// Nkeys): the seed is the client's secret, the public key the server's
// entry.
type NkeyUser struct {
	Seed, Public string
}

// NewNkeyUser creates a user nkey.
func NewNkeyUser(t testing.TB) NkeyUser {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	return NkeyUser{Seed: string(seed), Public: pub}
}

// Configure lets the user connect to a server (with full permissions).
func (u NkeyUser) Configure(opts *server.Options) {
	opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: u.Public})
}

// WriteSeed writes the seed to user.nk in a temp dir, as `nk -gen user`
// does, and returns its path.
func (u NkeyUser) WriteSeed(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(path, []byte(u.Seed+"\n"), 0o600))
	return path
}
