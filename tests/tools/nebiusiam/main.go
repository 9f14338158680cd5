// nebiusiam is the loopback stand-in of Nebius IAM's token exchange for tests/e2e: the gRPC
// service nebius.iam.v1.TokenExchangeService that github.com/nebius/gosdk v0.2.29 (the version
// provider-helm v1.4.0 and provider-kubernetes v1.3.1 link) dials at tokens.iam.api.nebius.cloud:443
// (services/nebius/iam/v1/token_exchange_service.sdk.go and conn/resolvers.go: "tokens.iam" +
// ".{domain}", constants.Domain "api.nebius.cloud:443"), served with gosdk's own generated server
// interface over TLS.
//
// It checks what a real exchange would (auth/exchangable.go, ServiceAccountExchangeTokenRequester):
// the grant and token types, and a subject token that is an RS256 JWT with kid = the key's id,
// iss = sub = the service account, audience token-service.iam.new.nebiuscloud.net, not expired,
// signed by the service account's key. It answers with the bearer token read from --token-file
// at each call (the workload API server's), or PERMISSION_DENIED. Each call is one JSON line on
// stdout (no token material).
package main

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/golang-jwt/jwt/v5"
	iampb "github.com/nebius/gosdk/proto/nebius/iam/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

const (
	audience         = "token-service.iam.new.nebiuscloud.net"
	grantType        = "urn:ietf:params:oauth:grant-type:token-exchange"
	requestedType    = "urn:ietf:params:oauth:token-type:access_token"
	subjectTokenType = "urn:ietf:params:oauth:token-type:jwt"
)

type server struct {
	iampb.UnimplementedTokenExchangeServiceServer
	key       *rsa.PublicKey
	keyID     string
	account   string
	tokenFile string
}

func (s *server) check(req *iampb.ExchangeTokenRequest) error {
	if req.GetGrantType() != grantType || req.GetRequestedTokenType() != requestedType ||
		req.GetSubjectTokenType() != subjectTokenType {
		return fmt.Errorf("unexpected grant %q, requested %q, subject type %q",
			req.GetGrantType(), req.GetRequestedTokenType(), req.GetSubjectTokenType())
	}
	claims := &jwt.RegisteredClaims{}
	token, err := jwt.ParseWithClaims(req.GetSubjectToken(), claims, func(t *jwt.Token) (any, error) {
		if kid, _ := t.Header["kid"].(string); kid != s.keyID {
			return nil, fmt.Errorf("kid %q is not the service account's key %q", kid, s.keyID)
		}
		return s.key, nil
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience(audience),
		jwt.WithIssuer(s.account), jwt.WithSubject(s.account), jwt.WithExpirationRequired(),
		jwt.WithIssuedAt())
	if err != nil {
		return err
	}
	if !token.Valid {
		return errors.New("invalid subject token")
	}
	return nil
}

func (s *server) Exchange(_ context.Context, req *iampb.ExchangeTokenRequest) (*iampb.CreateTokenResponse, error) {
	entry := map[string]any{"method": "Exchange", "subject_token_type": req.GetSubjectTokenType()}
	defer func() { line, _ := json.Marshal(entry); fmt.Println(string(line)) }()
	if err := s.check(req); err != nil {
		entry["error"] = err.Error()
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	data, err := os.ReadFile(s.tokenFile)
	bearer := strings.TrimSpace(string(data))
	if err != nil || bearer == "" {
		entry["error"] = "no token to answer with"
		return nil, status.Error(codes.Unavailable, "no token to answer with")
	}
	entry["ok"] = true
	return &iampb.CreateTokenResponse{
		AccessToken:     bearer,
		IssuedTokenType: requestedType,
		TokenType:       "Bearer",
		ExpiresIn:       3600,
	}, nil
}

func publicKey(path string) (*rsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block in " + path)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	rsaKey, ok := key.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("not an RSA public key: " + path)
	}
	return rsaKey, nil
}

func main() {
	listen := flag.String("listen", "", "address:port to serve on")
	cert := flag.String("tls-cert", "", "server certificate (PEM)")
	keyFile := flag.String("tls-key", "", "server key (PEM)")
	pub := flag.String("public-key", "", "the service account's public key (PEM, PKIX)")
	keyID := flag.String("public-key-id", "", "the service account key's id")
	account := flag.String("account-id", "", "the service account's id")
	tokenFile := flag.String("token-file", "", "file holding the bearer token to answer with")
	flag.Parse()
	key, err := publicKey(*pub)
	if err != nil {
		log.Fatal(err)
	}
	creds, err := credentials.NewServerTLSFromFile(*cert, *keyFile)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	iampb.RegisterTokenExchangeServiceServer(srv, &server{key: key, keyID: *keyID, account: *account, tokenFile: *tokenFile})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; srv.GracefulStop() }()
	log.Printf("serving nebius.iam.v1.TokenExchangeService on %s", lis.Addr())
	if err := srv.Serve(lis); err != nil {
		log.Fatal(err)
	}
}
