package api

import (
	"context"

	"github.com/gin-gonic/gin"
)

// Engine is the handler of every route (tests add routes to it).
func (s *Server) Engine() *gin.Engine { return s.engine }

// LoadItem reads an item into the cache as an announced change's reload
// does (tests hold its MySQL read to race it).
func (s *Server) LoadItem(ctx context.Context, id int64) error { return s.sale.Items().Reload(ctx, id) }
